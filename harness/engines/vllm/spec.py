"""vLLM's per-request speculative stats (`metrics.speculative_decoding`, 0.29.0+ with
`--per-request-spec-decode-metrics summary`; vllm-project/vllm#48915), normalised to REQUEST_SPEC_KEYS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.common.versions import version_at_least
from harness.engines.base import REQUEST_SPEC_KEYS
from harness.engines.vllm.launch import PER_REQUEST_SINCE

if TYPE_CHECKING:
    from harness.inputs.config import Variant
    from harness.inputs.run_settings import RunSettings


def request_spec(spec: dict | None, output_tokens: int | None) -> dict[str, Any]:
    """num_spec_steps -> verify steps; accept length as SGLang's is read: (completion - 1) / steps, the
    prefill's token left out; vLLM's own mean_acceptance_length (1 + accepted / steps) when the
    completion is unknown. The histogram: index = accepted drafts in one step, value = steps."""
    if not spec:
        return dict.fromkeys(REQUEST_SPEC_KEYS)
    steps = spec.get("num_spec_steps")
    accepted = spec.get("num_accepted_draft_tokens")
    accept = None
    if steps:
        accept = ((output_tokens - 1) / steps) if output_tokens else spec.get("mean_acceptance_length")
    hist = spec.get("acceptance_histogram")
    return {"spec_verify_ct": steps, "spec_accept_len": accept, "spec_correct_drafts": accepted,
            "spec_proposed_drafts": spec.get("num_draft_tokens"),
            "spec_histogram": " ".join(str(int(x)) for x in hist) if isinstance(hist, list) else None}


def spec_mode(run: RunSettings, variant: Variant, version: str | None) -> str:
    """stream (the final usage chunk carries the stats) from 0.29.0; off before, or when asked."""
    if run.per_request_spec == "off" or not variant.spec_algorithm:
        return "off"
    return "stream" if version is None or version_at_least(version, PER_REQUEST_SINCE) else "off"
