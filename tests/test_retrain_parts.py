"""The loop's parts that need no server: the stand-in's content-dependent acceptance, the fake trainer's
fine-tuning from --ckpt-dir, the generation check, the gate's rule, promotion's file rewrite, drift rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.checks import compat
from harness.common.errors import InputError
from harness.inputs.config import load_drafter, load_plan
from harness.inputs.drafter_record import LineageEntry, TrainedAgainst, config_fingerprint
from harness.inputs.plan_parts import Drafter
from harness.retrain import fake_trainer, gate
from harness.retrain.profile import AcceptStats
from harness.retrain.promote import drafter_file, promote
from harness.retrain.train import TrainSpec, build_train_argv
from harness.retrain.watch import _row, parse_every
from harness.sim.sglang import model
from harness.sim.sglang.fixtures import write_eagle3_drafter
from harness.sim.sglang.startup import read_draft

RULE = {"contains": ["python"], "per_position": [0.2, 0.1]}


def test_stand_in_takes_the_profile_of_the_first_matching_rule(tmp_path):
    d = write_eagle3_drafter(tmp_path / "d", per_position=[0.8, 0.7], by_content=[RULE])
    draft = read_draft(str(d))
    assert draft.per_position == (0.8, 0.7) and draft.by_content == ((("python",), (0.2, 0.1)),)
    rules = draft.by_content
    assert model.content_profile(rules, [{"role": "user", "content": "Write PYTHON code"}]) == (0.2, 0.1)
    assert model.content_profile(rules, [{"role": "system", "content": "python"},
                                         {"role": "user", "content": "tea?"}]) is None  # user turns only
    assert model.content_profile((), [{"role": "user", "content": "python"}]) is None
    (d / "acceptance.json").write_text(json.dumps({"per_position": [0.5], "by_content": [{"contains": []}]}))
    with pytest.raises(ValueError, match="contains"):
        read_draft(str(d))


def _train(tmp_path: Path, rows: list[str], *, init: Path | None, epochs: int = 2, resume: bool = False,
           out: str = "out") -> dict:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    (target / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4,
                                                    "vocab_size": 256}))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "conversations": [
        {"role": "user", "content": t}, {"role": "assistant", "content": "an answer"}]}) + "\n"
        for i, t in enumerate(rows)))
    argv = ["--target-model-path", str(target), "--train-data-path", str(data), "--output-dir",
            str(tmp_path / out), "--num-epochs", str(epochs), "--ttt-length", "2", "--log-interval", "1000"]
    argv += ["--ckpt-dir", str(init)] if init else []
    argv += ["--resume"] if resume else []
    os.environ["DRAFTBENCH_FAKE_STEP_S"] = "0"
    try:
        assert fake_trainer.main(argv) == 0
    finally:
        os.environ.pop("DRAFTBENCH_FAKE_STEP_S", None)
    ckpt, _, _ = fake_trainer.last_checkpoint(tmp_path / out)
    assert ckpt is not None
    return json.loads((ckpt / "acceptance.json").read_text())


def test_fine_tuning_lifts_a_weak_spot_by_the_rows_it_saw(tmp_path):
    init = write_eagle3_drafter(tmp_path / "init", per_position=[0.8, 0.6], by_content=[RULE])
    full = _train(tmp_path, [f"python task {i}" for i in range(4)] + ["tea"], init=init, epochs=2)
    assert full["per_position"] == [0.8, 0.6]  # the general profile is the starting drafter's
    # 4 rows x 2 epochs = ROWS_TO_LEARN: fully lifted
    assert full["by_content"][0]["per_position"] == [0.8, 0.6]
    half = _train(tmp_path, ["python task", "tea", "coffee"], init=init, epochs=2, out="half")
    lift = 2 / fake_trainer.ROWS_TO_LEARN
    assert half["by_content"][0]["per_position"] == pytest.approx([0.2 + 0.6 * lift, 0.1 + 0.5 * lift])
    none = _train(tmp_path, ["tea", "coffee"], init=init, out="none")
    assert none["by_content"][0]["per_position"] == [0.2, 0.1]  # data without the weak topic: no help


def test_spec_passes_the_starting_checkpoint():
    spec = TrainSpec(target_model_path="t", data_path="d", output_dir="o", specforge_dir="sf",
                     init_from="/d/x")
    argv = build_train_argv(spec, "script", workdir="/w")
    assert argv[argv.index("--ckpt-dir") + 1] == "/d/x"
    with pytest.raises(InputError, match="v0.1"):
        build_train_argv(spec.model_copy(update={"draft_model_config": "c"}), "script-v0.1", workdir="/w")


TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "_name_or_path": "moonshotai/Kimi-K2.5",
          "text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61,
                          "rope_theta": 5e4}}


def test_generation_mismatch_names_the_retrain_command():
    rec = TrainedAgainst.of(TARGET)
    assert (rec.architecture, rec.hidden_size, rec.vocab_size) \
        == ("KimiK25ForConditionalGeneration", 7168, 163840)
    assert config_fingerprint({**TARGET, "_name_or_path": "/local/copy", "transformers_version": "5"}) == \
        rec.config_sha256  # where it lives and the tooling's version are not the model
    drafter = Drafter(name="k2", path="k2-eagle3", trained_for="moonshotai/Kimi-K2.5", trained_against=rec)
    assert compat.check_trained_for("v", drafter, "/models/Kimi-K2.5", None, TARGET, plan_path="p.yaml") == []
    # same shapes, another model
    k26 = {**TARGET, "text_config": {**TARGET["text_config"], "rope_theta": 1e5}}
    found = compat.check_trained_for("v", drafter, "/models/Kimi-K2.5", None, k26, plan_path="plans/k.yaml")
    assert [f.code for f in found] == ["trained-for-other-target"]
    assert "config_sha256" in found[0].what and "draftbench retrain plans/k.yaml --variant v" in found[0].fix
    wider = {**TARGET, "text_config": {**TARGET["text_config"], "hidden_size": 8192}}
    assert "hidden_size 7168 -> 8192" in compat.check_trained_for("v", drafter, "x", None, wider)[0].what
    by_name = Drafter(name="k2", path="k2-eagle3", trained_for="moonshotai/Kimi-K2-Instruct")
    found = compat.check_trained_for("v", by_name, "/models/Kimi-K2.5", None, None, plan_path="my plan.yaml")
    assert "another target" in found[0].what and "'my plan.yaml' --variant v" in found[0].fix


def test_gate_rule_words():
    assert gate._rule("faster", "faster", None, "")[0]
    assert not gate._rule("faster", "equivalent", (1.2, 1.1, 1.3), "")[0]  # the strict rule wants faster
    ok, why = gate._rule("faster-or-equivalent-higher-accept", "equivalent", (1.2, 1.1, 1.3), "")
    assert ok and "decidedly higher" in why
    ok, why = gate._rule("faster-or-equivalent-higher-accept", "equivalent", (1.02, 0.97, 1.08), "")
    assert not ok and "not decidedly higher" in why
    ok, why = gate._rule("faster", "undecided", None, "95% CI 0.9-1.3x")
    assert not ok and why.startswith("undecided, not faster: 95% CI")
    assert not gate._rule("faster-or-equivalent-higher-accept", "slower", (1.5, 1.4, 1.6), "")[0]
    # same step cost (a retrain keeps the head's shape): faster without a decided acceptance gain is noise
    ok, why = gate._rule("faster", "faster", (1.02, 0.99, 1.05), "", same_shape=True)
    assert not ok and "noise between the phases" in why
    assert gate._rule("faster", "faster", (1.02, 0.99, 1.05), "")[0]  # another shape may be cheaper per step
    assert gate._rule("faster", "faster", (1.3, 1.2, 1.4), "", same_shape=True)[0]


def test_same_step_cost_compares_the_servers_shape():
    a = {"engine": "sglang", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
         "cuda_graph": True, "drafter_path": "old"}
    assert gate.same_step_cost(a, {**a, "drafter_path": "new"})
    assert not gate.same_step_cost(a, {**a, "num_steps": 5})
    assert not gate.same_step_cost(a, {**a, "cuda_graph": False})
    assert not gate.same_step_cost(a, None)


def test_promotion_rewrites_the_drafter_file_with_lineage(tmp_path):
    (tmp_path / "drafters").mkdir()
    f = tmp_path / "drafters" / "coder.yaml"
    f.write_text("# kept comment\nname: coder\npath: models/old\nalgorithm: EAGLE3\nnotes: hello\n")
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "plan.yaml").write_text(
        "name: p\ntarget: {host: local}\nmodel: {path: m}\nvariants:\n  - name: baseline\n"
        "  - {name: v, drafter: coder}\n  - name: inline\n    drafter: {name: x, path: y}\n"
        "suites:\n  - name: s\n    prompts: [{id: a, text: hi}]\n")
    plan = load_plan(tmp_path / "plans" / "plan.yaml")  # drafters/ next to plans/, as in the checkout
    assert drafter_file(plan, "v") == f.resolve()
    with pytest.raises(InputError, match="inline"):
        drafter_file(plan, "inline")
    entry = LineageEntry(promoted_at="now", path="/ckpt/new", evaluation_run="/r/eval",
                         retrain_id="retrain-1")
    d = promote(f, new_path="/ckpt/new", entry=entry, target_cfg=TARGET, trained_for="m")
    assert d.path == "/ckpt/new" and d.notes == "hello" and d.trained_against.hidden_size == 7168
    assert [(e.previous_path, e.path) for e in d.lineage] == [("models/old", "/ckpt/new")]
    assert f.read_text().startswith("# kept comment\n# Promoted by draftbench retrain")
    again = promote(f, new_path="/ckpt/newer", entry=entry.model_copy(update={"path": "/ckpt/newer"}),
                    target_cfg=None)
    assert [e.previous_path
            for e in again.lineage] == ["models/old", "/ckpt/new"] and load_drafter(f) == again


def _stats(al: float, low: float | None, high: float | None) -> AcceptStats:
    return AcceptStats(requests=10, prompts=5, accept_len=al, accept_low=low, accept_high=high)


def test_drift_rows():
    rec = _stats(2.8, 2.6, 3.0)
    assert _row("code", rec, _stats(2.7, 2.5, 2.9)).state == "ok"  # the intervals overlap
    assert _row("code", rec, _stats(2.0, 1.9, 2.1)).state == "drift"  # wholly below the recorded one
    assert _row("code", rec, _stats(1.02, 1.0, 1.05)).state == "collapsed"
    assert _row("code", rec, _stats(3.5, 3.3, 3.7)).state == "better"
    assert _row("code", _stats(2.8, None, None), _stats(2.4, None, None)).state == "drift"  # < 0.9 x 2.8
    assert _row("code", _stats(2.8, None, None), _stats(2.6, None, None)).state == "ok"
    assert _row("new", None, _stats(2.0, 1.9, 2.1)).state == "new"
    assert _row("gone", rec, None).state == "not measured" and not _row("gone", rec, None).alarm


def test_every_parses_durations():
    assert [parse_every(t) for t in ("90", "90s", "30m", "1h", "1.5h", "1d")] \
        == [90, 90, 1800, 3600, 5400, 86400]
    for bad in ("", "0", "1w", "-5m", "soon"):
        with pytest.raises(InputError, match="duration"):
            parse_every(bad)
