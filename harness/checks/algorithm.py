"""What the drafter is (EAGLE-3, EAGLE-2, unknown) and whether the variant's algorithm fits it.

SGLang never looks at the drafter to pick the algorithm (REFERENCE §5.3): the flag alone turns on the
target's aux-hidden-state capture, so an EAGLE-3 drafter under EAGLE runs with accept len 1.00. vLLM's
`--speculative-config` method does the same: only `eagle3` returns the target's aux hidden states and applies
the head's fc to them (docs/vllm.md). Each finding names the flag as the variant's engine spells it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.checks.checkpoint import DrafterFacts, archs, drafter_kind, eagle3_evidence, text_config
from harness.common.findings import Finding, error

if TYPE_CHECKING:
    from harness.inputs.plan_parts import Drafter


def _alg(name: str | None) -> str | None:
    up = name.upper() if name else None
    return "EAGLE" if up == "NEXTN" else up  # SGLang maps NEXTN to EAGLE


def check_algorithm(
    variant: str,
    algorithm: str | None,
    drafter: Drafter | None,
    facts: DrafterFacts | None,
    target_cfg: dict[str, Any] | None,
    flag: Callable[[str], str] = lambda alg: f"--speculative-algorithm {alg}",
    engine: str = "SGLang",
) -> list[Finding]:
    """The variant's algorithm against what the drafter is (its files, else its drafters/ record); `flag`:
    the algorithm as the variant's engine's launch flag says it (Engine.algorithm_flag), `engine` its name."""
    alg = _alg(algorithm)
    if alg is None:
        return []
    out: list[Finding] = []
    name = drafter.name if drafter is not None else "the drafter"
    declared = _alg(drafter.algorithm) if drafter is not None else None
    cfg, tensors = (facts.config, facts.tensors) if facts else (None, None)
    kind = drafter_kind(cfg, tensors) if cfg is not None else "unknown"
    evidence = eagle3_evidence(cfg, tensors)
    is3 = kind == "eagle3" or (kind == "unknown" and declared == "EAGLE3")
    is2 = kind == "eagle2" or (kind == "unknown" and declared == "EAGLE")
    ht = text_config(target_cfg).get("hidden_size")
    if alg == "EAGLE" and is3:
        why_from = "; ".join(evidence) if evidence else f"drafters/ records it as algorithm: {declared}"
        dims = (
            f"{ht}-d hidden states instead of the {3 * ht}-d three-layer concat"
            if ht
            else "one hidden state instead of the three-layer concat"
        )
        out.append(
            error(
                variant,
                "eagle3-drafter-with-eagle",
                f"EAGLE-3 drafter '{name}' served with {flag('EAGLE')}",
                f"{why_from}. {engine} captures the target's aux hidden states only for {flag('EAGLE3')}, so "
                f"the drafter gets {dims}, silently skips its fc, and accept len stays at 1.00 with no error",
                f"set `algorithm: EAGLE3` on variant '{variant}' ({flag('EAGLE3')})",
            )
        )
    elif alg == "EAGLE3" and is2:
        out.append(
            error(
                variant,
                "eagle2-drafter-with-eagle3",
                f"EAGLE-2 drafter '{name}' served with {flag('EAGLE3')}",
                "EAGLE-3 sends the concat of three target hidden states to a drafter whose fc takes "
                "[embedding; hidden]: a shape error at start-up or on the first decode",
                f"set `algorithm: EAGLE` on variant '{variant}', or use an EAGLE-3 drafter",
            )
        )
    elif declared and declared != alg and drafter is not None and drafter.algorithm:
        out.append(
            error(
                variant,
                "drafter-algorithm-mismatch",
                f"drafter '{name}' is recorded as {declared} but served with {alg}",
                f"{engine} does not look at the drafter to pick the algorithm: the flag alone decides",
                f"serve it with {flag(declared)}, or correct its drafters/ record",
            )
        )
    if alg in ("EAGLE3", "STANDALONE") and drafter is None:
        out.append(
            error(
                variant,
                "eagle3-no-drafter",
                f"{alg} without a drafter",
                "SGLang then loads the target itself as the draft and crashes on normal targets "
                "(sglang #36528)",
                f"give variant '{variant}' a drafter",
            )
        )
    if kind == "eagle3" and cfg is not None and not any("eagle3" in a.lower() for a in archs(cfg)):
        names = ", ".join(archs(cfg)) or "none"
        out.append(
            error(
                variant,
                "drafter-arch-not-eagle3",
                f"EAGLE-3 weights but config.json architectures is [{names}]",
                "SGLang has no architecture remap for drafts: it loads this as a plain model, not an EAGLE-3 "
                "head",
                'set "architectures": ["LlamaForCausalLMEagle3"] in the drafter\'s config.json',
            )
        )
    return out
