"""Drafter checkpoint checks on tiny real EAGLE-3 checkpoints (config.json + safetensors), one per failure,
against Llama- and DeepSeek-shaped target configs. Only config files and safetensors headers are read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.checks import algorithm as al
from harness.checks import checkpoint as ck
from harness.checks import compat
from harness.checks.checkpoint import DrafterFacts
from harness.common.safetensors_io import TensorInfo, read_header
from harness.engines.base import DrafterCheck
from harness.engines.sglang import SGLANG
from harness.engines.vllm import VLLM
from harness.inputs.plan_parts import Drafter
from harness.sim.sglang.fixtures import write_eagle2_drafter, write_eagle3_drafter, write_target_model

LLAMA = {
    "hidden_size": 64,
    "num_layers": 32,
    "vocab_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
}
DEEPSEEK = {
    "hidden_size": 112,
    "num_layers": 61,
    "vocab_size": 320,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 224,
    "architecture": "DeepseekV3ForCausalLM",
}


def _cfg(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _facts(path: Path) -> DrafterFacts:
    return DrafterFacts(str(path), _cfg(path), read_header(path / "model.safetensors"))


def _edit(path: Path, **changes) -> None:
    cfg = _cfg(path)
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _codes(findings, severity: str | None = None) -> set[str]:
    return {f.code for f in findings if severity is None or f.severity == severity}


@pytest.fixture(params=["llama", "deepseek"])
def target(request, tmp_path) -> dict:
    shape = LLAMA if request.param == "llama" else DEEPSEEK
    cfg = _cfg(write_target_model(tmp_path / "target", **shape))
    cfg.pop("rope_parameters", None)
    return {**cfg, "rope_theta": 500000.0}  # explicit, whatever the fixture writes


def _drafter(tmp_path: Path, target: dict, name: str = "draft", **kw) -> Path:
    args = {
        "target_hidden_size": target["hidden_size"],
        "hidden_size": target["hidden_size"],
        "vocab_size": target["vocab_size"],
        "draft_vocab_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    args.update(kw)
    return write_eagle3_drafter(tmp_path / name, **args)


def test_matching_drafter_is_clean(tmp_path, target):
    d = _drafter(tmp_path, target)
    _edit(d, rope_theta=target["rope_theta"], rope_parameters=None, rope_scaling=None)
    assert ck.check_shapes("v", _facts(d), target) == []
    assert compat.check_rope("v", _cfg(d), target) == []
    assert ck.drafter_kind(_cfg(d), read_header(d / "model.safetensors")) == "eagle3"


def test_fc_for_another_hidden_size(tmp_path, target):
    other = target["hidden_size"] + 32
    d = _drafter(tmp_path, target, target_hidden_size=other)  # trained on a wider target
    found = ck.check_shapes("v", _facts(d), target)
    fc = next(f for f in found if f.code == "fc-shape")
    assert fc.severity == "error"
    assert f"[{target['hidden_size']}, {3 * target['hidden_size']}]" in fc.what
    assert f"hidden size {other}" in fc.why  # inferred: trained for another target
    assert "target-hidden-size" in _codes(found, "error")


def test_hidden_size_without_target_hidden_size(tmp_path, target):
    h = target["hidden_size"] * 2
    d = _drafter(tmp_path, target, hidden_size=h, target_hidden_size=h)
    found = ck.check_shapes("v", _facts(d), target)
    assert {"fc-shape", "hidden-size"} <= _codes(found, "error")


def test_missing_embedding_when_sizes_differ(tmp_path, target):
    d = _drafter(tmp_path, target, hidden_size=32)  # target_hidden_size != hidden_size needs embed_tokens
    assert ck.check_shapes("v", _facts(d), target) == []
    facts = _facts(d)
    tensors = {k: v for k, v in facts.tensors.items() if k != "embed_tokens.weight"}
    found = ck.check_shapes("v", DrafterFacts(facts.path, facts.config, tensors), target)
    assert _codes(found) == {"embed-missing"}


def test_vocab_mismatch(tmp_path, target):
    d = _drafter(tmp_path, target, vocab_size=target["vocab_size"] * 2)
    found = ck.check_shapes("v", _facts(d), target)
    assert {"vocab-size", "t2d-shape"} <= _codes(found, "error")


def test_draft_vocab_size_missing(tmp_path, target):
    d = _drafter(tmp_path, target, include_draft_vocab_size=False)
    facts = _facts(d)
    head = DrafterCheck("v", [], facts.config, ck.aux_layer_ids(facts.config), target["num_hidden_layers"],
                        "0.5.15.post1")
    found = SGLANG.checkpoint_findings(head)
    assert "draft-vocab-missing" in _codes(found, "error")
    assert any("AttributeError" in f.why for f in found)
    # SGLang's rule, not vLLM's: 0.26.0's llama_eagle3.py sets draft_vocab_size to the target's vocab size
    # when the config lacks it, so a vLLM arm's preflight must not stop on it
    shared = ck.check_shapes("v", facts, target)
    assert "draft-vocab-missing" not in _codes(shared + VLLM.checkpoint_findings(head))


def test_token_map_missing(tmp_path, target):
    d = _drafter(tmp_path, target, include_token_map=False)
    found = ck.check_shapes("v", _facts(d), target)
    assert _codes(found) == {"token-map-missing"}
    # without d2t/t2d, eagle_config or an Eagle3 name the files do not say EAGLE-3 any more
    _edit(d, architectures=["LlamaForCausalLM"])
    assert ck.drafter_kind(_cfg(d), read_header(d / "model.safetensors")) == "unknown"


def test_lm_head_and_d2t_against_draft_vocab_size(tmp_path, target):
    d = _drafter(tmp_path, target, draft_vocab_size=64)
    _edit(d, draft_vocab_size=80)
    found = ck.check_shapes("v", _facts(d), target)
    assert {"lm-head-shape", "d2t-shape"} <= _codes(found, "error")
    assert any("[64, " in f.what and "[80, " in f.what for f in found if f.code == "lm-head-shape")


def test_aux_layer_ids_outside_target(tmp_path, target):
    L = target["num_hidden_layers"]
    d = _drafter(tmp_path, target, aux_layer_ids=[1, L // 2, L - 1])
    found = _on_sglang(d, target, "0.5.15.post1")
    bad = next(f for f in found if f.code == "aux-layer-range")
    assert str([L - 1]) in bad.what
    ok = _drafter(tmp_path, target, name="ok", aux_layer_ids=[1, L // 2, L - 2])
    assert _on_sglang(ok, target, "0.5.15.post1") == []
    # SGLang's convention (id k: the input of layer k + 1): vLLM picks its layers by its own rules (its
    # drafter_findings), and the nested ids only size fc there, so a vLLM arm's preflight does not stop on it
    facts = _facts(d)
    head = DrafterCheck("v", [], facts.config, ck.aux_layer_ids(facts.config), L, "0.26.0")
    shared = ck.check_shapes("v", facts, target)
    assert "aux-layer-range" not in _codes(shared + VLLM.checkpoint_findings(head))


def _on_sglang(d: Path, target: dict, version: str | None) -> list:
    """The shape checks and SGLang's own version rules on the head, as the preflight runs them."""
    facts = _facts(d)
    head = DrafterCheck("v", [], facts.config, ck.aux_layer_ids(facts.config), target["num_hidden_layers"],
                        version)
    return ck.check_shapes("v", facts, target) + SGLANG.checkpoint_findings(head)


def test_aux_layer_count_before_0_5_12(tmp_path, target):
    d = _drafter(tmp_path, target, aux_layer_ids=[1, 5, 9, 13])  # fc is 4 x hidden: consistent
    assert "aux-layer-count" in _codes(_on_sglang(d, target, "0.5.11"))
    assert _on_sglang(d, target, "0.5.12") == []


def test_multi_layer_drafter_needs_0_5_12(tmp_path, target):
    d = _drafter(tmp_path, target, num_layers=2)
    assert "draft-layers" in _codes(_on_sglang(d, target, "0.5.11.post1"), "error")
    assert _on_sglang(d, target, "0.5.12") == []
    assert _on_sglang(d, target, None) == []  # unknown version: no window check


def test_release_limits_are_sglangs_alone(tmp_path, target):
    """The shared shape checks hold no version rule: a two-layer head with four aux layers is a problem of
    SGLang before 0.5.12, never another engine's (vLLM has no such rule: its checkpoint_findings is empty)."""
    d = _drafter(tmp_path, target, num_layers=2, aux_layer_ids=[1, 5, 9, 13])
    facts = _facts(d)
    assert ck.check_shapes("v", facts, target) == []
    head = DrafterCheck("v", [], facts.config, ck.aux_layer_ids(facts.config), target["num_hidden_layers"],
                        "0.5.0")
    assert _codes(SGLANG.checkpoint_findings(head)) == {"aux-layer-count", "draft-layers"}
    assert VLLM.checkpoint_findings(head) == []


def test_max_position_embeddings(tmp_path, target):
    d = _drafter(tmp_path, target, max_position_embeddings=2048)
    assert compat.check_positions("v", _cfg(d), 2048, "") == []
    warn = compat.check_positions("v", _cfg(d), 4100, " (prompt s/p1)")
    assert [f.code for f in warn] == ["max-position"] and "2048" in warn[0].what and "4100" in warn[0].what


def test_rope_mismatch(tmp_path, target):
    d = _drafter(tmp_path, target)
    _edit(d, rope_theta=None, rope_parameters=None, rope_scaling=None)  # no rope keys: transformers' default
    found = compat.check_rope("v", _cfg(d), target)
    assert [f.code for f in found] == ["rope-mismatch"]
    _edit(d, rope_parameters={"rope_type": "default", "rope_theta": target["rope_theta"]})
    assert compat.check_rope("v", _cfg(d), target) == []
    _edit(d, rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": target["rope_theta"]})
    assert [f.code for f in compat.check_rope("v", _cfg(d), target)] == ["rope-mismatch"]


def _drafter_rec(algorithm: str = "EAGLE3", trained_for: str | None = None) -> Drafter:
    return Drafter(name="dr", path="x", algorithm=algorithm, trained_for=trained_for)


def test_eagle3_checkpoint_with_eagle_flag(tmp_path, target):
    d = _drafter(tmp_path, target)
    found = al.check_algorithm("wrong", "EAGLE", _drafter_rec(), _facts(d), target)
    assert [f.code for f in found] == ["eagle3-drafter-with-eagle"]
    f = found[0]
    assert f.severity == "error" and "EAGLE3" in f.fix
    assert f"{target['hidden_size']}-d" in f.why and f"{3 * target['hidden_size']}-d" in f.why
    # NEXTN is SGLang's alias of EAGLE: same mistake
    assert _codes(al.check_algorithm("w", "nextn", _drafter_rec(), _facts(d), target)) == {
        "eagle3-drafter-with-eagle"
    }
    assert al.check_algorithm("ok", "EAGLE3", _drafter_rec(), _facts(d), target) == []


def test_eagle3_detected_from_files_alone(tmp_path, target):
    d = _drafter(tmp_path, target)
    _edit(d, architectures=["LlamaForCausalLM"])  # SafeAILab-style name: d2t/t2d still give it away
    found = al.check_algorithm("v", "EAGLE", _drafter_rec(algorithm="EAGLE"), _facts(d), target)
    assert {"eagle3-drafter-with-eagle", "drafter-arch-not-eagle3"} == _codes(found)
    assert any("d2t/t2d" in f.why for f in found)


def test_eagle2_checkpoint_with_eagle3_flag(tmp_path, target):
    d = write_eagle2_drafter(
        tmp_path / "e2", hidden_size=target["hidden_size"], vocab_size=target["vocab_size"]
    )
    facts = _facts(d)
    assert ck.drafter_kind(facts.config, facts.tensors) == "eagle2"
    found = al.check_algorithm("v", "EAGLE3", _drafter_rec(algorithm="EAGLE"), facts, target)
    assert _codes(found) == {"eagle2-drafter-with-eagle3"}
    assert ck.check_shapes("v", facts, target) == []  # not an EAGLE-3 layout: no EAGLE-3 shape rules
    assert al.check_algorithm("v", "EAGLE", _drafter_rec(algorithm="EAGLE"), facts, target) == []


def test_record_only_when_files_unreadable():
    facts = DrafterFacts("/nowhere", problem="missing")
    assert _codes(al.check_algorithm("v", "EAGLE", _drafter_rec("EAGLE3"), facts, None)) == {
        "eagle3-drafter-with-eagle"
    }
    assert _codes(al.check_algorithm("v", "EAGLE3", None, None, None)) == {"eagle3-no-drafter"}


def test_trained_for_another_target():
    rec = _drafter_rec(trained_for="moonshotai/Kimi-K2-Instruct")
    found = compat.check_trained_for("aq", rec, "/models/Kimi-K2.5", None, None)
    assert [(f.severity, f.code) for f in found] == [("warning", "trained-for-other-target")]
    same = _drafter_rec(trained_for="moonshotai/Kimi-K2.5")
    assert compat.check_trained_for("k", same, "/models/Kimi-K2.5", None, None) == []
    hf_cache = "/root/.cache/huggingface/hub/models--moonshotai--Kimi-K2.5"
    assert compat.check_trained_for("k", same, hf_cache, None, None) == []
    assert compat.check_trained_for("k", _drafter_rec(), "/models/x", None, None) == []


def test_seed_scale_kimi_shapes_from_header_only():
    """The seed's case at real size, without writing 300 MB: a Kimi-K2.5 text config nested under
    text_config, a drafter fc of [7168, 21504], checked against a 4096-wide (Llama-8B) drafter too."""
    kimi = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840},
    }
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 7168,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
        "num_hidden_layers": 1,
    }

    def info(dtype, *shape):
        n = 1
        for s in shape:
            n *= s
        return TensorInfo(dtype, shape, (0, n * (8 if dtype == "I64" else 1 if dtype == "BOOL" else 2)))

    tensors = {
        "fc.weight": info("BF16", 7168, 21504),
        "lm_head.weight": info("BF16", 32000, 7168),
        "d2t": info("I64", 32000),
        "t2d": info("BOOL", 163840),
    }
    assert ck.check_shapes("k25", DrafterFacts("/d", cfg, tensors), kimi) == []
    llama_drafter = dict(cfg, hidden_size=4096, vocab_size=128256)
    tensors8b = {
        "fc.weight": info("BF16", 4096, 12288),
        "lm_head.weight": info("BF16", 32000, 4096),
        "d2t": info("I64", 32000),
        "t2d": info("BOOL", 128256),
    }
    found = ck.check_shapes("k25", DrafterFacts("/d", llama_drafter, tensors8b), kimi)
    fc = next(f for f in found if f.code == "fc-shape")
    assert "21504" in fc.what and "hidden size 4096" in fc.why
    assert {"hidden-size", "vocab-size", "t2d-shape"} <= _codes(found)


async def test_drafter_directory_behind_a_symlink_is_read(tmp_path):
    """A `latest` link to the newest checkpoint directory is how training runs are often pointed at:
    listing its weights must follow the link (found on the H200 with a trained drafter)."""
    from harness.checks.remote import read_drafter
    from harness.targets.local import LocalTarget

    real = _drafter(tmp_path, LLAMA | {"vocab_size": 256}, name="epoch_3_step_120")
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    facts = await read_drafter(LocalTarget(), str(link))
    assert facts.problem is None
    assert {"fc.weight", "lm_head.weight", "d2t", "t2d"} <= set(facts.tensors)
    assert tuple(facts.tensors["fc.weight"].shape) == (64, 3 * 64)
