"""Write fake model directories for the stand-in and for tests: a target config and EAGLE-2/EAGLE-3 drafts.

The drafts carry the real tensor names and shape relations of SpecForge/SGLang checkpoints (REFERENCE §6)
at tiny sizes, so header-only checks see a real layout. ``acceptance.json`` holds the simulated
per-position conditional acceptance probabilities the stand-in samples from.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from harness.common.safetensors_io import tensor_nbytes, write_safetensors
from harness.sim.sglang.model import tokenizer_json

ACCEPTANCE_FILE = "acceptance.json"
_ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def _dump(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=1) + "\n")


def write_target_model(
    directory: str | Path,
    *,
    hidden_size: int = 4096,
    num_layers: int = 32,
    vocab_size: int = 128256,
    architecture: str = "LlamaForCausalLM",
    num_attention_heads: int = 32,
    num_key_value_heads: int = 8,
    intermediate_size: int = 14336,
    max_position_embeddings: int = 8192,
    torch_dtype: str = "bfloat16",
) -> Path:
    """config.json (no weights: the stand-in never loads them; DeepSeek architectures get MLA fields) and a
    tokenizer.json that counts tokens as the stand-in does (model.tokenizer_json)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, object] = {
        "architectures": [architecture],
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": hidden_size // num_attention_heads,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if "deepseek" in architecture.lower():
        cfg.update(
            model_type="deepseek_v3",
            kv_lora_rank=512,
            q_lora_rank=1536,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            n_routed_experts=256,
            num_experts_per_tok=8,
            moe_intermediate_size=2048,
            first_k_dense_replace=3,
            num_nextn_predict_layers=1,
        )
        cfg.pop("head_dim")
    else:
        cfg["model_type"] = "llama"
    _dump(d / "config.json", cfg)
    (d / "tokenizer.json").write_text(json.dumps(tokenizer_json()) + "\n")
    return d


def _filled(dtype: str, shape: tuple[int, ...], seed: int) -> bytes:
    """Small non-zero deterministic payload (a repeating 2-byte pattern) so files are not all zeros."""
    n = tensor_nbytes(dtype, shape)
    pattern = struct.pack("<H", 0x3C00 + (seed % 97))
    return (pattern * (n // 2 + 1))[:n]


def _token_map(vocab_size: int, draft_vocab_size: int) -> tuple[bytes, bytes]:
    """d2t (int64 offsets, target_id = i + d2t[i]) and t2d (bool mask) for an evenly spread hot set."""
    if not 0 < draft_vocab_size <= vocab_size:
        raise ValueError(f"draft_vocab_size {draft_vocab_size} must be in 1..vocab_size ({vocab_size})")
    used = sorted({i * vocab_size // draft_vocab_size for i in range(draft_vocab_size)})
    d2t = struct.pack(f"<{draft_vocab_size}q", *(t - i for i, t in enumerate(used)))
    mask = bytearray(vocab_size)
    for t in used:
        mask[t] = 1
    return d2t, bytes(mask)


def write_acceptance(directory: str | Path, per_position: list[float],
                     by_content: list[dict[str, Any]] | None = None) -> Path:
    """acceptance.json; `by_content`: [{"contains": [words], "per_position": [...]}], a request whose user
    text holds one of the words takes that profile (the first rule that matches)."""
    for profile in [per_position] + [r.get("per_position") or [] for r in by_content or []]:
        if not profile or any(not 0.0 <= p <= 1.0 for p in profile):
            raise ValueError(f"per_position must be non-empty probabilities in [0, 1], got {profile!r}")
    path = Path(directory) / ACCEPTANCE_FILE
    data: dict[str, Any] = {"per_position": [float(p) for p in per_position]}
    if by_content:
        data["by_content"] = [{"contains": [str(w) for w in r["contains"]],
                               "per_position": [float(p) for p in r["per_position"]]} for r in by_content]
    _dump(path, data)
    return path


def write_eagle3_drafter(
    directory: str | Path,
    *,
    target_hidden_size: int | None = None,
    hidden_size: int = 32,
    vocab_size: int = 128,
    draft_vocab_size: int = 32,
    per_position: list[float] | None = None,
    by_content: list[dict[str, Any]] | None = None,
    architecture: str = "LlamaForCausalLMEagle3",
    aux_layer_ids: list[int] | None = None,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int | None = None,
    num_layers: int = 1,
    max_position_embeddings: int = 2048,
    torch_dtype: str = "bfloat16",
    include_draft_vocab_size: bool = True,
    include_token_map: bool = True,
) -> Path:
    """An EAGLE-3 draft in SpecForge's saved layout (REFERENCE §6.2), small shapes, plus acceptance.json.

    ``target_hidden_size`` (default: ``hidden_size``) must equal the target's hidden size, as for a real
    checkpoint: the stand-in fails at start-up with SGLang's shape error otherwise.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    H, V, Vd = hidden_size, vocab_size, draft_vocab_size
    Ht = H if target_hidden_size is None else target_hidden_size
    head_dim = H // num_attention_heads
    inter = intermediate_size or 2 * H
    cfg: dict[str, object] = {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": inter,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim,
        "num_hidden_layers": num_layers,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "vocab_size": V,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    if include_draft_vocab_size:
        cfg["draft_vocab_size"] = Vd
    if Ht != H:
        cfg["target_hidden_size"] = Ht
    if aux_layer_ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids)}
    _dump(d / "config.json", cfg)

    dt = _ST_DTYPE[torch_dtype]
    n_aux = len(aux_layer_ids) if aux_layer_ids else 3
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (H, n_aux * Ht),
        "midlayer.self_attn.q_proj.weight": (num_attention_heads * head_dim, 2 * H),
        "midlayer.self_attn.k_proj.weight": (num_key_value_heads * head_dim, 2 * H),
        "midlayer.self_attn.v_proj.weight": (num_key_value_heads * head_dim, 2 * H),
        "midlayer.self_attn.o_proj.weight": (H, num_attention_heads * head_dim),
        "midlayer.mlp.gate_proj.weight": (inter, H),
        "midlayer.mlp.up_proj.weight": (inter, H),
        "midlayer.mlp.down_proj.weight": (H, inter),
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.hidden_norm.weight": (H,),
        "midlayer.post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
    }
    if Ht != H:  # SGLang keeps the draft's own embedding only when the hidden sizes differ
        shapes["embed_tokens.weight"] = (V, H)
    tensors = {name: (dt, shape, _filled(dt, shape, i)) for i, (name, shape) in enumerate(shapes.items())}
    if include_token_map:
        d2t, t2d = _token_map(V, Vd)
        tensors["d2t"] = ("I64", (Vd,), d2t)
        tensors["t2d"] = ("BOOL", (V,), t2d)
    write_safetensors(d / "model.safetensors", tensors, metadata={"format": "pt"})
    write_acceptance(d, per_position if per_position is not None else [0.8, 0.7, 0.6, 0.5, 0.4], by_content)
    return d


def write_eagle2_drafter(
    directory: str | Path,
    *,
    hidden_size: int = 32,
    vocab_size: int = 128,
    per_position: list[float] | None = None,
    architecture: str = "LlamaForCausalLMEagle",
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int | None = None,
    torch_dtype: str = "bfloat16",
) -> Path:
    """An EAGLE(-2) draft as SGLang's ``LlamaForCausalLMEagle`` loads it: fc over [embed; hidden] (2H)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    H, V = hidden_size, vocab_size
    head_dim = H // num_attention_heads
    inter = intermediate_size or 2 * H
    _dump(
        d / "config.json",
        {
            "architectures": [architecture],
            "model_type": "llama",
            "hidden_size": H,
            "intermediate_size": inter,
            "num_attention_heads": num_attention_heads,
            "num_key_value_heads": num_key_value_heads,
            "num_hidden_layers": 1,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-05,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": torch_dtype,
            "vocab_size": V,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    )
    dt = _ST_DTYPE[torch_dtype]
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (H, 2 * H),
        "fc.bias": (H,),
        "layers.0.self_attn.q_proj.weight": (num_attention_heads * head_dim, H),
        "layers.0.self_attn.k_proj.weight": (num_key_value_heads * head_dim, H),
        "layers.0.self_attn.v_proj.weight": (num_key_value_heads * head_dim, H),
        "layers.0.self_attn.o_proj.weight": (H, num_attention_heads * head_dim),
        "layers.0.mlp.gate_proj.weight": (inter, H),
        "layers.0.mlp.up_proj.weight": (inter, H),
        "layers.0.mlp.down_proj.weight": (H, inter),
        "layers.0.post_attention_layernorm.weight": (H,),
    }
    write_safetensors(
        d / "model.safetensors",
        {n: (dt, s, _filled(dt, s, i)) for i, (n, s) in enumerate(shapes.items())},
        metadata={"format": "pt"},
    )
    write_acceptance(d, per_position if per_position is not None else [0.6, 0.45, 0.3])
    return d
