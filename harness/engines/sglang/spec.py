"""SGLang's per-request speculative stats, normalised across its key renames (REFERENCE §4.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.common.versions import version_at_least
from harness.engines.base import REQUEST_SPEC_KEYS

if TYPE_CHECKING:
    from harness.inputs.config import Variant
    from harness.inputs.run_settings import RunSettings

_HIST_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def request_spec(spec: dict | None, output_tokens: int | None) -> dict[str, Any]:
    """verify steps, accept length (prefill token left out), correct/proposed drafts and the histogram
    (index = correct drafts in one verify step, value = steps; SGLang 0.5.9+), as a space-joined string."""
    if not spec:
        return dict.fromkeys(REQUEST_SPEC_KEYS)
    verify = spec.get("spec_verify_ct")
    correct = spec.get("spec_num_correct_drafts", spec.get("spec_accepted_drafts",
                                                            spec.get("spec_accept_token_num")))
    proposed = spec.get("spec_num_proposed_drafts", spec.get("spec_proposed_drafts",
                                                              spec.get("spec_draft_token_num")))
    completion = spec.get("completion_tokens", output_tokens)
    accept = None
    if verify:
        # the first token comes from prefill, not from a verify step: leave it out, as the server's log
        # windows and avg_spec_accept_length do (SGLang's own spec_accept_length over-states by ~1/verify)
        accept = ((completion - 1) / verify) if completion else spec.get("spec_accept_length")
    hist = next((spec[k] for k in _HIST_KEYS if isinstance(spec.get(k), list)), None)
    return {"spec_verify_ct": verify, "spec_accept_len": accept, "spec_correct_drafts": correct,
            "spec_proposed_drafts": proposed,
            "spec_histogram": " ".join(str(int(x)) for x in hist) if hist is not None else None}


def spec_mode(run: RunSettings, variant: Variant, version: str | None) -> str:
    """How to get per-request spec stats from this server (REFERENCE §4): stream | meta_info | off."""
    if run.per_request_spec == "off" or not variant.spec_algorithm:
        return "off"
    if version_at_least(version, "0.5.19"):
        return "stream"
    if version_at_least(version, "0.5.13"):
        return "meta_info"
    return "off"


# Forced acceptance for performance work (srt/speculative/spec_utils.py, 0.5.x): SGLANG_SIMULATE_ACC_LEN > 0
# makes every verify step accept a drawn number of tokens; "match-expected" draws floor/ceiling so that the
# mean is the asked length ("multinomial", the default, rounds a normal draw and is biased at the clamps).
FORCED_LEN_ENV = "SGLANG_SIMULATE_ACC_LEN"
FORCED_METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"


def forced_acceptance(env: dict[str, str] | None) -> float | None:
    try:
        value = float((env or {}).get(FORCED_LEN_ENV, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def forced_env(accept_len: float) -> dict[str, str]:
    return {FORCED_LEN_ENV: f"{accept_len:g}", FORCED_METHOD_ENV: "match-expected"}
