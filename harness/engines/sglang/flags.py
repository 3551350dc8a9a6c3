"""Launch-flag checks on one variant's argv, from the facts tables of REFERENCE §5 (pure functions).

The tables are the fallback: when SGLang is importable on the target, its own parser judges spelling
and the auto-chosen values (harness.engines.sglang.parser_probe); the semantic checks here always run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.common.eagle3 import default_aux_ids
from harness.common.findings import Finding, error, info, warning
from harness.common.versions import parse_version, version_lt

if TYPE_CHECKING:
    from harness.inputs.config import Variant

STEPS, TOPK, NDT = "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
ALGORITHM_SINCE = {
    "EAGLE": "0.4.3",
    "NEXTN": "0.4.3",
    "EAGLE3": "0.4.4",
    "STANDALONE": "0.5.2",
    "NGRAM": "0.5.3",
    "DFLASH": "0.5.11",
}
# What disabling CUDA graphs costs: eager decode pays a kernel launch per op per step, and a speculative
# step is num_steps small draft forwards plus a verify forward, so drafting suffers most.
GRAPH_COST = (
    "decode and verify steps run eagerly: at small batch each step typically takes 1.5-3x as "
    "long, and a speculative step (num_steps draft forwards + one verify) pays that several times, "
    "enough to make a good drafter slower than the baseline (the seed measured exactly that)"
)


@dataclass(frozen=True)
class FlagHistory:
    since: str | None = None  # first release that accepts it
    older: str | None = None  # the spelling before `since`
    deprecated: str | None = None  # from here it works but warns
    removed: str | None = None  # from here argparse rejects it
    replacement: str | None = None  # the spelling to use where this one warns or fails
    removed_message: str = ""  # what argparse prints once removed


FLAG_HISTORY: dict[str, FlagHistory] = {
    "--cuda-graph-max-bs": FlagHistory(
        deprecated="0.5.14",
        removed="0.5.20",
        replacement="--cuda-graph-max-bs-decode",
        removed_message="ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill",
    ),
    "--cuda-graph-max-bs-decode": FlagHistory(since="0.5.14", older="--cuda-graph-max-bs"),
    "--cuda-graph-backend-decode": FlagHistory(since="0.5.14", older="--disable-cuda-graph"),
    "--cuda-graph-backend-prefill": FlagHistory(since="0.5.14", older="--disable-cuda-graph"),
    "--disable-cuda-graph": FlagHistory(
        deprecated="0.5.14",
        replacement="--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled",
    ),
    "--speculative-draft-model-revision": FlagHistory(since="0.5.2"),
    "--speculative-attention-mode": FlagHistory(since="0.5.2"),
    "--speculative-draft-load-format": FlagHistory(since="0.5.3.post3"),
    "--speculative-moe-runner-backend": FlagHistory(since="0.5.4.post3"),
    "--speculative-draft-attention-backend": FlagHistory(since="0.5.7"),
    "--speculative-draft-model-quantization": FlagHistory(since="0.5.7"),
    "--enable-multi-layer-eagle": FlagHistory(since="0.5.7"),
    "--speculative-adaptive": FlagHistory(since="0.5.11"),
    "--speculative-adaptive-config": FlagHistory(since="0.5.11"),
    "--speculative-draft-window-size": FlagHistory(since="0.5.12"),
    "--speculative-use-rejection-sampling": FlagHistory(since="0.5.14"),
}


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """`--flag value` / `--flag=value` / bare `--flag` -> {flag: value or None}; the last one wins, as in
    argparse."""
    out: dict[str, str | None] = {}
    for i, tok in enumerate(argv):
        if not tok.startswith("--") or tok == "--":
            continue
        if "=" in tok:
            name, value = tok.split("=", 1)
            out[name] = value
        else:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[tok] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


def graphs_disabled(argv: list[str]) -> str | None:
    """The flag that turns decode CUDA graphs off, or None."""
    flags = flag_values(argv)
    for name in ("--disable-cuda-graph", "--disable-decode-cuda-graph"):
        if name in flags:
            return name
    if (flags.get("--cuda-graph-backend-decode") or "").lower() == "disabled":
        return "--cuda-graph-backend-decode disabled"
    return None


def graph_max_bs(argv: list[str], planned: int | None) -> int | None:
    """The decode CUDA graph batch cap the argv asks for, as argparse reads it (the last of
    --cuda-graph-max-bs-decode and its older spelling --cuda-graph-max-bs): a plan may pass it in
    extra_args (the H200 plans pass 16) rather than server.cuda_graph_max_bs; else `planned`."""
    cap = None
    for i, tok in enumerate(argv):  # the later of the two spellings wins, as both set one dest
        name, eq, value = tok.partition("=")
        if name in ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"):
            cap = _int(value if eq else argv[i + 1] if i + 1 < len(argv) else None)
    return cap if cap is not None else planned


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def auto_spec_params(
    target_arch: str | None, version: str | None, algorithm: str
) -> tuple[int, int, int] | None:
    """(steps, topk, draft tokens) SGLang picks when none is given (REFERENCE §5.1); None when unknown."""
    if version is None:
        return None
    if algorithm == "STANDALONE":
        return (3, 1, 4)
    arch = target_arch or ""
    if arch in ("LlamaForCausalLM", "Grok1ForCausalLM"):
        return (5, 4, 8)
    if "Deepseek" in arch or "GptOss" in arch:
        return (5, 4, 8) if version_lt(version, "0.4.9") else (3, 1, 4)
    return (5, 4, 8) if version_lt(version, "0.5.8") else (3, 1, 4)


def check_spec_params(
    variant: Variant, argv: list[str], version: str | None, target_arch: str | None, tables: bool = True
) -> list[Finding]:
    """steps / topk / draft tokens: all or none, and a draft-token count the tree can hold."""
    alg = (variant.spec_algorithm or "").upper()
    if alg not in EAGLE_FAMILY:
        return []
    name, flags = variant.name, flag_values(argv)
    given = [f for f in (STEPS, TOPK, NDT) if f in flags]
    out: list[Finding] = []
    if 0 < len(given) < 3:
        if not tables:  # a real parser was asked: its own rejection says it
            return out
        missing = [f for f in (STEPS, TOPK, NDT) if f not in flags]
        out.append(
            error(
                name,
                "spec-params-partial",
                f"only {', '.join(given)} set; {', '.join(missing)} missing",
                "SGLang asserts that all three are unset when it chooses them itself, so the server "
                "fails at start-up (sglang #5673)",
                "set num_steps, eagle_topk and num_draft_tokens together, or none of them",
            )
        )
        return out
    if not given:
        if tables:
            auto = auto_spec_params(target_arch, version, alg)
            picked = f" ({auto[0]}, {auto[1]}, {auto[2]} for this target on {version})" if auto else ""
            out.append(
                info(
                    name,
                    "spec-params-auto",
                    f"SGLang picks steps/topk/draft tokens itself{picked}",
                    "the choice depends on the target architecture and SGLang version",
                    "set all three to compare like with like across versions",
                )
            )
        return out
    steps, topk, ndt = _int(flags[STEPS]), _int(flags[TOPK]), _int(flags[NDT])
    if steps is None or topk is None or ndt is None:
        return out
    if topk > 1 and ndt > steps * topk + 1:
        out.append(
            error(
                name,
                "draft-tokens-too-many",
                f"num_draft_tokens {ndt} > num_steps × eagle_topk + 1 = {steps * topk + 1}",
                "the draft tree has at most steps × topk candidate tokens plus the root to verify",
                f"set num_draft_tokens ≤ {steps * topk + 1}, or raise num_steps / eagle_topk",
            )
        )
    configured = variant.num_draft_tokens
    if topk == 1 and configured is not None and configured != steps + 1:
        out.append(
            info(
                name,
                "draft-tokens-adjusted",
                f"num_draft_tokens {configured} becomes {steps + 1} (num_steps + 1) because eagle_topk is 1",
                "with topk 1 the draft is a chain of num_steps tokens; SGLang overrides the value too",
                f"write num_draft_tokens: {steps + 1} to say what runs",
            )
        )
    return out


def check_flag_versions(
    variant_name: str, argv: list[str], version: str | None, algorithm: str | None
) -> list[Finding]:
    """Flags and algorithm names the installed SGLang does not accept (or only with a warning)."""
    if version is None:
        return []
    out: list[Finding] = []
    v = parse_version(version)
    for flag in flag_values(argv):
        hist = FLAG_HISTORY.get(flag)
        if hist is None:
            continue
        if hist.since and v < parse_version(hist.since):
            fix = f"spell it {hist.older}" if hist.older else f"remove it, or use SGLang ≥ {hist.since}"
            out.append(
                error(
                    variant_name,
                    "flag-not-in-version",
                    f"{flag} does not exist in SGLang {version}",
                    f"it was added in {hist.since}; argparse stops the server with "
                    f"'unrecognized arguments: {flag}'",
                    fix,
                )
            )
        elif hist.removed and v >= parse_version(hist.removed):
            out.append(
                error(
                    variant_name,
                    "flag-renamed",
                    f"{flag} fails on SGLang {version}",
                    f"removed in {hist.removed}; argparse says '{hist.removed_message}'",
                    f"spell it {hist.replacement}",
                )
            )
        elif hist.deprecated and v >= parse_version(hist.deprecated):
            out.append(
                info(
                    variant_name,
                    "flag-deprecated",
                    f"{flag} is deprecated in SGLang {version}",
                    f"it still works (deprecated since {hist.deprecated})",
                    f"prefer {hist.replacement}",
                )
            )
    alg = (algorithm or "").upper()
    since = ALGORITHM_SINCE.get(alg)
    if since and v < parse_version(since):
        out.append(
            error(
                variant_name,
                "algorithm-not-in-version",
                f"--speculative-algorithm {alg} does not exist in SGLang {version}",
                f"added in {since}; the server refuses the value",
                f"use SGLang ≥ {since}",
            )
        )
    return out


def check_cuda_graphs(
    variant: Variant, argv: list[str], baseline_argv: list[str] | None, max_batch: int,
    graph_max_bs: int | None,
) -> list[Finding]:
    """CUDA graphs off (and what it costs), or batches larger than the captured graphs."""
    name, out = variant.name, []
    off = graphs_disabled(argv)
    base_off = graphs_disabled(baseline_argv) if baseline_argv is not None else None
    if off:
        if variant.is_baseline:
            why = "baseline decode runs eagerly, so its tok/s is understated and every speedup overstated"
        else:
            why = GRAPH_COST
            if baseline_argv is not None and not base_off:
                why += (
                    "; the baseline keeps its graphs, so the comparison measures graphs as much as drafting"
                )
        out.append(
            warning(
                name,
                "cuda-graph-disabled",
                f"CUDA graphs disabled ({off})",
                why,
                f"drop cuda_graph: false / {off} from variant '{name}'",
            )
        )
    elif graph_max_bs is not None and max_batch > graph_max_bs:
        out.append(
            warning(
                name,
                "cuda-graph-max-bs-low",
                f"batches up to {max_batch} but CUDA graphs are captured up to {graph_max_bs}",
                "decode steps above the captured size run eagerly ('cuda graph: False' windows)",
                f"raise server.cuda_graph_max_bs to {max_batch}",
            )
        )
    return out


def check_aux_capture_bug(
    variant_name: str, ids: list[Any] | None, target_layers: int | None, version: str | None, graphs_on: bool
) -> list[Finding]:
    """Custom aux layer ids under CUDA graphs on 0.4.9-0.5.10: the graph capture reset them (sglang
    #22836)."""
    if not ids or not target_layers or not graphs_on or version is None:
        return []
    if not (version_lt(version, "0.5.11") and not version_lt(version, "0.4.9")):
        return []
    default = default_aux_ids(target_layers)
    if list(ids) == default:
        return []
    how = (
        "the default layers replace the drafter's whenever CUDA graphs are on"
        if version_lt(version, "0.5.6")
        else "eager prefill uses the drafter's layers but CUDA-graph decode and verify use the defaults"
    )
    return [
        warning(
            variant_name,
            "aux-ids-cuda-graph-bug",
            f"custom aux layer ids {list(ids)} (default {default}) with CUDA graphs on SGLang {version}",
            f"known capture bug before 0.5.11: {how}, so the drafter sees the wrong layers and "
            "acceptance drops, up to accept len 1.00",
            "use SGLang ≥ 0.5.11 (or compare accept len with cuda_graph: false to confirm)",
        )
    ]
