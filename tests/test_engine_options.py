"""Each engine's own options in a plan (`target.sglang:`, `target.vllm:`): the old flat keys still load as
aliases, their errors name the key as written, nodes inherit them field by field, and run directories
written with the old keys still resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.rundir import REDACTED, redact_plan, write_json
from harness.bench.resume import resume_plan
from harness.common.errors import InputError
from harness.inputs.config import Plan, load_plan, upgraded_plan
from harness.inputs.engine_options import SGLangOptions, VLLMOptions

SIM = ["{python}", "-m", "harness.sim"]
SIM_VLLM = ["{python}", "-m", "harness.sim.vllm", "serve"]
FIXTURE_RUN = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "decided" / "run"


def _plan(target: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": "opts", "target": target, "model": {"path": "/models/m"},
            "variants": [{"name": "base"}, {"name": "v-base", "engine": "vllm"}],
            "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}], **more}


def _load(tmp_path: Path, data: dict[str, Any]) -> Plan:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_plan(path)


def _error(tmp_path: Path, text: str) -> InputError:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_plan(path)
    return info.value


def test_old_keys_load_as_each_engines_options(tmp_path):
    old = _load(tmp_path, _plan({"launcher": SIM, "sglang_version": "0.5.15.post1", "vllm_launcher": SIM_VLLM,
                                 "vllm_version": "0.33.0"}))
    assert old.target.sglang == SGLangOptions(launcher=SIM, version="0.5.15.post1")
    assert old.target.vllm == VLLMOptions(launcher=SIM_VLLM, version="0.33.0")
    new = _load(tmp_path, _plan({"sglang": {"launcher": SIM, "version": "0.5.15.post1"},
                                 "vllm": {"launcher": SIM_VLLM, "version": "0.33.0"}}))
    assert old.resolved_dict() == new.resolved_dict()
    assert Plan.model_validate(old.resolved_dict()).resolved_dict() == new.resolved_dict()
    old_keys = {"launcher", "sglang_version", "vllm_launcher", "vllm_version"}
    assert old_keys.isdisjoint(new.resolved_dict()["target"])


@pytest.mark.parametrize("version", ["auto", "0.5.15", "0.5.15.post1", "0.6.0rc1", "0.33.0"])
def test_versions_accepted_in_either_spelling(tmp_path, version):
    assert _load(tmp_path, _plan({"sglang": {"version": version}})).target.sglang.version == version
    assert _load(tmp_path, _plan({"vllm_version": version})).target.vllm.version == version
    pinned = _load(tmp_path, _plan({"sglang_version": version})).target.sglang.pinned
    assert pinned == (None if version == "auto" else version)


@pytest.mark.parametrize(("target", "line", "field", "words"), [
    ("  sglang_version: latest", 3, "target.sglang_version", "'0.5.15'"),
    ("  sglang_version: 0.6", 3, "target.sglang_version", "put it in quotes: '0.6'"),
    ("  launcher: []", 3, "target.launcher", "must not be empty"),
    ("  launcher: [a, {b: 1}]", 3, "target.launcher[1]", "expected a string"),
    ("  vllm_launcher: []", 3, "target.vllm_launcher", "must not be empty"),
    ("  vllm_version: 0.x", 3, "target.vllm_version", "'0.5.15'"),
    ("  sglang:\n    version: latest", 4, "target.sglang.version", "'0.5.15'"),
    ("  vllm: {launcher: []}", 3, "target.vllm.launcher", "must not be empty"),
    ("  sglang: {version: '0.5.9'}\n  sglang_version: '0.5.9'", 4, "target.sglang_version", "given twice"),
    ("  sglang_versoin: '0.5.9'", 3, "target.sglang_versoin", "did you mean 'sglang_version'"),
    ("  sglang: {vesion: '0.5.9'}", 3, "target.sglang.vesion", "did you mean 'version'"),
])
def test_errors_name_the_key_as_written(tmp_path, target, line, field, words):
    text = f"name: x\ntarget:\n{target}\nmodel: {{path: m}}\nvariants: [{{name: b}}]\nsuites: [smoke]\n"
    err = _error(tmp_path, text)
    assert (err.line, err.field) == (line, field), str(err)
    assert words in err.message


def test_an_old_key_in_a_node_is_placed_there(tmp_path):
    text = "name: x\ntargets:\n  - host: a\n  - host: b\n    vllm_version: bad\nmodel: {path: m}\n" \
           "variants: [{name: b}]\nsuites: [smoke]\n"
    err = _error(tmp_path, text)
    assert (err.line, err.field) == (5, "targets[1].vllm_version")


def test_a_node_fills_in_its_engine_options_field_by_field(tmp_path):
    plan = _load(tmp_path, _plan({"launcher": SIM, "sglang_version": "0.5.15", "vllm": {"version": "0.30.0"}},
                                 targets=["a", {"host": "b", "sglang_version": "0.5.20"},
                                          {"host": "c", "vllm": {"launcher": SIM_VLLM}}]))
    a, b, c = plan.node_targets()
    assert a.sglang == SGLangOptions(launcher=SIM, version="0.5.15")
    assert b.sglang == SGLangOptions(launcher=SIM, version="0.5.20")  # its version, the plan's launcher
    assert c.vllm == VLLMOptions(launcher=SIM_VLLM, version="0.30.0") and c.sglang == a.sglang


def _old_shape(resolved: dict[str, Any]) -> dict[str, Any]:
    """A plan.resolved.json as draftbench wrote it before the engines owned their options."""
    data = json.loads(json.dumps(resolved))
    t = data["target"]
    sglang, vllm = t.pop("sglang"), t.pop("vllm")
    t.update(launcher=sglang["launcher"], sglang_version=sglang["version"], vllm_launcher=vllm["launcher"],
             vllm_version=vllm["version"])
    return data


def test_a_run_directory_written_with_the_old_keys_resumes(tmp_path):
    """Its plan.resolved.json loads as it is; passed the same plan in the new spelling, the resume finds no
    difference; and the secret in its redacted launcher comes back from the plan file."""
    data = _plan({"launcher": [*SIM, "--api-key", "sk-live-1234"], "sglang_version": "0.5.15.post1"})
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "results" / "20260101-000000-opts"
    run_dir.mkdir(parents=True)
    stored = redact_plan(_old_shape(load_plan(plan_file).resolved_dict()))
    assert stored["target"]["launcher"][-1] == REDACTED and "sglang" not in stored["target"]
    write_json(run_dir / "plan.resolved.json", stored)
    write_json(run_dir / "provenance.json", {"plan_file": str(plan_file), "status": "incomplete"})

    resumed = resume_plan(run_dir)
    assert resumed.plan.target.sglang.launcher == [*SIM, "--api-key", "sk-live-1234"]
    assert resumed.plan.target.sglang.version == "0.5.15.post1" and resumed.file_differs == []

    new_file = tmp_path / "new.yaml"
    t = data["target"]
    new_file.write_text(yaml.safe_dump({**data, "target": {"sglang": {"launcher": t["launcher"],
                                                                     "version": t["sglang_version"]}}}))
    assert resume_plan(run_dir, new_file).applied == []


def test_the_recorded_h200_run_directory_still_loads(tmp_path):
    stored = json.loads((FIXTURE_RUN / "plan.resolved.json").read_text())
    assert stored["target"]["sglang_version"] == "0.5.15.post1"  # written before the engines' options
    plan = Plan.model_validate(stored)
    assert plan.target.sglang == SGLangOptions(version="0.5.15.post1") and plan.target.vllm == VLLMOptions()
    assert upgraded_plan(stored)["target"] == plan.resolved_dict()["target"]
    copy = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, copy)
    assert resume_plan(copy).plan.target.sglang.version == "0.5.15.post1"


def test_each_engines_launcher_is_redacted():
    plan = Plan.model_validate(_plan({"sglang": {"launcher": [*SIM, "--api-key=sk-a"]},
                                      "vllm": {"launcher": [*SIM_VLLM, "--api-key", "sk-b"]}}))
    target = redact_plan(plan.resolved_dict())["target"]
    assert target["sglang"]["launcher"][-1] == f"--api-key={REDACTED}"
    assert target["vllm"]["launcher"][-1] == REDACTED
