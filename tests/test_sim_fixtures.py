"""Fake model directories: real EAGLE-3 / EAGLE tensor names and shape relations (REFERENCE §6), small
files."""

from __future__ import annotations

import json

import numpy as np
from safetensors import safe_open

from harness.common.safetensors_io import read_header
from harness.sim.sglang.fixtures import write_eagle2_drafter, write_eagle3_drafter, write_target_model

EAGLE3_NAMES = {
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}


def test_eagle3_drafter_layout(tmp_path):
    d = write_eagle3_drafter(
        tmp_path / "draft",
        target_hidden_size=48,
        hidden_size=32,
        vocab_size=100,
        draft_vocab_size=20,
        per_position=[0.9, 0.5],
    )
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == 20 and cfg["vocab_size"] == 100 and cfg["target_hidden_size"] == 48
    header = read_header(d / "model.safetensors")
    assert set(header) == EAGLE3_NAMES | {"embed_tokens.weight"}  # own embedding because 48 != 32
    assert header["fc.weight"].shape == (32, 3 * 48)
    assert header["midlayer.self_attn.q_proj.weight"].shape == (32, 64)  # input is [embeds; hidden]
    assert header["lm_head.weight"].shape == (20, 32)
    assert header["d2t"].dtype == "I64" and header["d2t"].shape == (20,)
    assert header["t2d"].dtype == "BOOL" and header["t2d"].shape == (100,)
    with safe_open(str(d / "model.safetensors"), framework="numpy") as f:
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
    targets = np.arange(20) + d2t
    assert (np.diff(targets) > 0).all() and targets.max() < 100 and (d2t >= 0).all()
    assert int(t2d.sum()) == 20 and t2d[targets].all()
    assert json.loads((d / "acceptance.json").read_text()) == {"per_position": [0.9, 0.5]}
    assert (d / "model.safetensors").stat().st_size < 64 * 1024


def test_eagle3_drafter_variants(tmp_path):
    d = write_eagle3_drafter(tmp_path / "d", aux_layer_ids=[1, 5, 9, 12], include_draft_vocab_size=False)
    cfg = json.loads((d / "config.json").read_text())
    assert "draft_vocab_size" not in cfg and "target_hidden_size" not in cfg
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 5, 9, 12]}
    header = read_header(d / "model.safetensors")
    assert header["fc.weight"].shape == (32, 4 * 32)  # one block per aux layer
    assert "embed_tokens.weight" not in header


def test_eagle2_drafter_layout(tmp_path):
    d = write_eagle2_drafter(tmp_path / "e2", hidden_size=32, vocab_size=100)
    assert json.loads((d / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle"]
    header = read_header(d / "model.safetensors")
    assert header["fc.weight"].shape == (32, 64)
    assert "layers.0.self_attn.q_proj.weight" in header and "d2t" not in header


def test_target_configs(tmp_path):
    llama = json.loads((write_target_model(tmp_path / "l", hidden_size=256) / "config.json").read_text())
    assert llama["architectures"] == ["LlamaForCausalLM"] and llama["head_dim"] == 8
    ds = json.loads(
        (write_target_model(tmp_path / "d", architecture="DeepseekV3ForCausalLM") / "config.json").read_text()
    )
    assert ds["model_type"] == "deepseek_v3" and ds["kv_lora_rank"] == 512 and "head_dim" not in ds
