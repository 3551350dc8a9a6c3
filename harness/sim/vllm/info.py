"""The stand-in's /server_info (dev mode). vLLM 0.26.0's `show_server_info`
(entrypoints/serve/dev/server_info/api_router.py) answers `{"vllm_config": str(vllm_config), "vllm_env":
{...}, "system_env": {...}}` in its default text format. The text is `VllmConfig.__str__` (config/vllm.py),
whose speculative part is `SpeculativeConfig.__repr__` (config/speculative.py):
`SpeculativeConfig(method='eagle3', model='/head', num_spec_tokens=3)`, or `None` without
--speculative-config; the H200's vLLM 0.26.0 logged the same text after "with config:"
(tests/fixtures/vllm-0.26.0/measure/logs/). Fields this stand-in has no notion of carry vLLM's defaults.
Also the EAGLE-3 capture layers the stand-in resolves from the head's and the target's configs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

NO_DRAFT_MODEL = ("ngram", "suffix", "extract_hidden_states", "custom_class")  # their repr says model=None


def speculative_repr(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return "None"
    method = cfg.get("method")
    model = None if method in NO_DRAFT_MODEL else cfg.get("model")
    return (f"SpeculativeConfig(method={method!r}, model={model!r}, "
            f"num_spec_tokens={cfg.get('num_speculative_tokens')!r})")


def config_text(ns: Any) -> str:
    """VllmConfig.__str__ for the stand-in's parsed `vllm serve` arguments."""
    served = ns.served_model_name or [ns.model_tag]
    fields = [
        ("model", repr(ns.model_tag)), ("speculative_config", speculative_repr(ns.speculative_config)),
        ("tokenizer", repr(ns.model_tag)), ("skip_tokenizer_init", "False"), ("tokenizer_mode", "auto"),
        ("revision", "None"), ("tokenizer_revision", "None"),
        ("trust_remote_code", str(ns.trust_remote_code)), ("dtype", "torch.bfloat16"),
        ("max_seq_len", str(ns.max_model_len or 4096)), ("download_dir", "None"),
        ("load_format", "auto"), ("tensor_parallel_size", str(ns.tensor_parallel_size)),
        ("pipeline_parallel_size", "1"), ("data_parallel_size", "1"), ("decode_context_parallel_size", "1"),
        ("dcp_comm_backend", "ag_rs"), ("disable_custom_all_reduce", "False"), ("quantization", "None"),
        ("quantization_config", "None"), ("enforce_eager", str(ns.enforce_eager)),
        ("enable_return_routed_experts", "False"), ("kv_cache_dtype", "auto"), ("device_config", "cuda"),
        ("seed", "0"), ("served_model_name", served[0]), ("enable_prefix_caching", "True"),
        ("enable_chunked_prefill", "True"),
    ]
    return ", ".join(f"{k}={v}" for k, v in fields)


def server_info(ns: Any) -> dict[str, Any]:
    return {"vllm_config": config_text(ns),
            "vllm_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_") and "KEY" not in k},
            "system_env": {}}


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def aux_layers(ns: Any, draft: Path) -> tuple[list[int], bool]:
    """The layers vLLM 0.33 captures: the head config's top-level ids, else the target's (2, L // 2, L -
    3)."""
    top = read_json(draft / "config.json").get("eagle_aux_hidden_state_layer_ids")
    if top:
        return list(top), True
    L = int(read_json(Path(ns.model_tag) / "config.json").get("num_hidden_layers") or 32)
    return [2, L // 2, L - 3], False


def trained_layers(draft: Path) -> list[int] | None:
    """The capture layers (vLLM's convention) a SpecForge-layout head was trained on: eagle_config ids + 1."""
    eagle = read_json(draft / "config.json").get("eagle_config") or {}
    nested = eagle.get("eagle_aux_hidden_state_layer_ids")
    return [int(k) + 1 for k in nested] if nested else None
