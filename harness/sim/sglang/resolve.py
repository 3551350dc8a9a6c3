"""What SGLang 0.5.15's ``ServerArgs.__post_init__`` does to parsed flags, as far as the stand-in needs it.

Speculative settings follow ``arg_groups/speculative_hook.py`` (algorithm aliases, the all-three-or-none
assertion, auto-choice by target architecture, the topk-1 adjustment, 48 running requests); memory and CUDA
graph defaults follow the H200 branch of the GPU-memory heuristics (chunked prefill 8192, decode graphs up
to batch 256 at tp < 4, mem_fraction_static from the reserved-memory estimate).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from harness.sim.sglang import flags_table
from harness.sim.sglang.args import build_parser

# The simulated GPU: one H200 as `nvidia-smi` reports it (MiB), used by the memory heuristics.
GPU_MEM_MIB = 143771
VERSION = "0.5.15.post1"


def emulated_version() -> str:
    """The release the stand-in answers as: its flags and formats are 0.5.15's; from 0.5.19 it also sends the
    per-request `sglext.spec_tokens_details` (the one later format tests need)."""
    import os

    return os.environ.get("DRAFTBENCH_SIM_SGLANG_VERSION") or VERSION
SPEC_ALGORITHMS = ("DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE")
_AUTO_314_ARCHS = {  # arg_groups/speculative_hook.py::_auto_choose_speculative_params
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV2ForCausalLM",
    "GptOssForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
}
MTP_TARGETS = {  # targets whose checkpoint bundles the draft (draft path defaults to the target)
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "HYV3ForCausalLM",
}
MAX_RUNNING_MSG = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by "
    "explicitly setting --max-running-requests."
)
TOPK1_MSG = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
)


# --- resolution ---------------------------------------------------------------------------------------------


def _decode_capture_bs(max_bs: int, spec: bool, no_padding: bool) -> list[int]:
    if no_padding:
        bs = list(range(1, max_bs + 1))
    elif not spec:
        bs = (
            [1, 2, 4, 8, 12]
            + list(range(16, 257, 8))
            + list(range(272, 512, 16))
            + list(range(512, max_bs + 1, 32))
        )
    else:
        bs = (
            list(range(1, 9))
            + list(range(10, 33, 2))
            + list(range(40, 65, 4))
            + list(range(72, 257, 8))
            + list(range(272, max_bs + 1, 16))
        )
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def _prefill_capture_bs(max_bs: int) -> list[int]:
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return [s for s in sizes if s <= max_bs]


def _cuda_graph_config(sa: dict[str, Any]) -> dict[str, Any]:
    raw = sa.get("cuda_graph_config") or {}
    dec, pre = dict(raw.get("decode") or {}), dict(raw.get("prefill") or {})
    off = sa["disable_cuda_graph"]
    dec_backend = dec.get("backend") or sa["cuda_graph_backend_decode"] or "full"
    if off or sa["disable_decode_cuda_graph"]:
        dec_backend = "disabled"
    pre_backend = pre.get("backend") or sa["cuda_graph_backend_prefill"] or "breakable"
    if off or sa["disable_prefill_cuda_graph"]:
        pre_backend = "disabled"
    max_bs = dec.get("max_bs") or sa["cuda_graph_max_bs_decode"] or (256 if sa["tp_size"] < 4 else 512)
    bs = dec.get("bs") or sa["cuda_graph_bs_decode"]
    bs = (
        sorted(bs)
        if bs
        else _decode_capture_bs(
            max_bs, sa["speculative_algorithm"] is not None, sa["disable_cuda_graph_padding"]
        )
    )
    if dec.get("bs") or sa["cuda_graph_bs_decode"]:
        max_bs = max(bs)
    pre_max = pre.get("max_bs") or sa["cuda_graph_max_bs_prefill"] or sa["chunked_prefill_size"]
    if sa["context_length"] is not None:
        pre_max = min(pre_max, sa["context_length"])
    pre_bs = pre.get("bs") or sa["cuda_graph_bs_prefill"] or _prefill_capture_bs(pre_max)
    tc = sa["cuda_graph_tc_compiler"] or "eager"
    return {
        "decode": {
            "backend": dec_backend,
            "max_bs": max_bs,
            "bs": bs,
            "tc_compiler": tc,
            "full_prefill_max_req": None,
        },
        "prefill": {
            "backend": pre_backend,
            "max_bs": pre_max,
            "bs": pre_bs,
            "tc_compiler": tc,
            "full_prefill_max_req": None,
        },
    }


def _auto_mem_fraction(sa: dict[str, Any], cg: dict[str, Any]) -> float:
    reserved = 512 + max(sa["chunked_prefill_size"], 2048) * 1.5
    if cg["decode"]["backend"] != "disabled":
        reserved += cg["decode"]["max_bs"] * 2
    reserved += sa["tp_size"] * sa["pp_size"] / 8 * 1024
    if cg["prefill"]["backend"] != "disabled":
        reserved += len(cg["prefill"]["bs"]) * 8
    reserved = max(reserved, 10 * 1024)  # gpu_mem > 60 GiB
    return round((GPU_MEM_MIB - reserved) / GPU_MEM_MIB, 3)


def resolve(
    ns: argparse.Namespace, target_arch: str, *, seed: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Resolved ServerArgs fields (dataclass order) and the warnings __post_init__ logs, in order.

    Raises what SGLang raises for inconsistent speculative settings (AssertionError without a message,
    ValueError for an unknown algorithm, TypeError for a half-specified tree).
    """
    parser_defaults = vars(build_parser().parse_args(["--model-path", "x"]))
    given = vars(ns)
    sa: dict[str, Any] = {}
    for name, resolved_default in flags_table.FIELDS.items():
        if name in given and given[name] != parser_defaults.get(name):
            sa[name] = given[name]
        else:
            sa[name] = resolved_default
    sa["model_path"] = ns.model_path
    warnings: list[str] = []
    if sa["tokenizer_path"] is None:
        sa["tokenizer_path"] = sa["model_path"]
    if sa["served_model_name"] is None:
        sa["served_model_name"] = sa["model_path"]
    if sa["random_seed"] is None:
        sa["random_seed"] = random.Random(seed).randint(0, 1 << 30)
    _resolve_speculative(sa, target_arch, warnings)
    cg = _cuda_graph_config(sa)
    sa["cuda_graph_config"] = cg
    if sa["mem_fraction_static"] is None:
        sa["mem_fraction_static"] = _auto_mem_fraction(sa, cg)
    return sa, warnings


def _resolve_speculative(sa: dict[str, Any], target_arch: str, warnings: list[str]) -> None:
    if sa["speculative_draft_model_path"] is not None and sa["speculative_draft_model_revision"] is None:
        sa["speculative_draft_model_revision"] = "main"
    algo = sa["speculative_algorithm"]
    if algo is None:
        return
    algo = algo.upper()
    if algo in ("NEXTN", "EAGLE"):
        algo = "EAGLE"
    sa["speculative_algorithm"] = algo
    if algo not in SPEC_ALGORITHMS:
        raise ValueError(f"Unknown speculative algorithm name: {algo}")
    if algo not in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algo != "NONE" and sa["max_running_requests"] is None:
            sa["max_running_requests"] = 48
            warnings.append(MAX_RUNNING_MSG)
        return
    if sa["max_running_requests"] is None:
        sa["max_running_requests"] = 48
        warnings.append(MAX_RUNNING_MSG)
    if sa["enable_mixed_chunk"]:
        sa["enable_mixed_chunk"] = False
        warnings.append("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
    if target_arch in MTP_TARGETS:
        if sa["speculative_draft_model_path"] is None:
            sa["speculative_draft_model_path"] = sa["model_path"]
            sa["speculative_draft_model_revision"] = sa["revision"]
        elif target_arch not in ("MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"):
            warnings.append("DeepSeek MTP does not require setting speculative_draft_model_path.")
    if not sa["speculative_adaptive"] and sa["speculative_num_steps"] is None:
        # SGLang's bare assert: all three or none.
        if not (sa["speculative_eagle_topk"] is None and sa["speculative_num_draft_tokens"] is None):
            raise AssertionError()
        sa["speculative_num_steps"], sa["speculative_eagle_topk"], sa["speculative_num_draft_tokens"] = (
            auto_choose_speculative_params(algo, target_arch)
        )
    steps, topk, ndt = (
        sa["speculative_num_steps"],
        sa["speculative_eagle_topk"],
        sa["speculative_num_draft_tokens"],
    )
    if topk == 1 and ndt != steps + 1:
        warnings.append(TOPK1_MSG)
        sa["speculative_num_draft_tokens"] = steps + 1
    if topk is None:  # steps given without topk: SGLang compares None > 1 next and crashes
        raise TypeError("'>' not supported between instances of 'NoneType' and 'int'")
    if sa["speculative_num_draft_tokens"] is None:  # tree without a size: first use subtracts from None
        raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'")


def auto_choose_speculative_params(algo: str, target_arch: str) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) SGLang 0.5.15 picks when none is given."""
    if algo == "STANDALONE":
        return (3, 1, 4)
    if target_arch == "LlamaForCausalLM":
        return (5, 4, 8)
    if target_arch in _AUTO_314_ARCHS:
        return (3, 1, 4)
    if target_arch in ("Grok1ForCausalLM", "Grok1VForCausalLM"):
        return (5, 4, 8)
    return (3, 1, 4)


def _py_repr(name: str, value: Any) -> str:
    if name == "cuda_graph_config" and isinstance(value, dict):

        def phase(p: dict[str, Any]) -> str:
            return "PhaseConfig(" + ", ".join(f"{k}={v!r}" for k, v in p.items()) + ")"

        return f"CudaGraphConfig(decode={phase(value['decode'])}, prefill={phase(value['prefill'])})"
    return repr(value)


def server_args_repr(sa: dict[str, Any]) -> str:
    """``ServerArgs(...)`` exactly as the dataclass repr SGLang logs at start-up."""
    return "ServerArgs(" + ", ".join(f"{k}={_py_repr(k, v)}" for k, v in sa.items()) + ")"
