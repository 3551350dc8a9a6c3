"""What a resume runs and who may run it, without a server: the plan comes from the run directory's
plan.resolved.json (a changed plan is refused with the differences, a harmless change is taken, redacted
values come from the plan file), a run directory has one holder at a time (harness.bench.lock), and a phase's
superseded attempts are left out of the tables (harness.analysis.attempts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.attempts import (
    ATTEMPT_COLUMNS,
    CountingAppender,
    done_phases,
    final_tables,
    start_attempt,
)
from harness.analysis.rundir import redact_plan, write_json
from harness.analysis.store import CsvAppender
from harness.bench.lock import RunDirLock
from harness.bench.resume import HARMLESS, harmless, resume_plan
from harness.common.errors import InputError
from harness.inputs.config import load_plan

PLAN = {
    "name": "r",
    "target": {"host": "local", "workdir": "/srv/w",
               "env": {"HF_TOKEN": "hf_secret_value", "OMP_NUM_THREADS": "4"}},
    "model": {"path": "models/target"},
    "variants": [{"name": "baseline"},
                 {"name": "eagle", "algorithm": "EAGLE3", "drafter": {"name": "d", "path": "models/d"},
                  "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
                  "extra_args": ["--api-key", "sk-live-1234"]}],
    "suites": [{"name": "s",
                "prompts": [{"id": "p0", "text": "hello there"}, {"id": "p1", "text": "bye now"}]}],
    "run": {"concurrency": [1, 4], "max_tokens": 32},
}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run_dir(tmp_path: Path, data: dict = PLAN) -> tuple[Path, Path]:
    """A run directory as the runner leaves it: plan.resolved.json (redacted) and provenance.json."""
    plan_file = _write(tmp_path / "plan.yaml", data)
    run_dir = tmp_path / "results" / "20260101-000000-r"
    run_dir.mkdir(parents=True)
    write_json(run_dir / "plan.resolved.json", redact_plan(load_plan(plan_file).resolved_dict()))
    write_json(run_dir / "provenance.json", {"plan_file": str(plan_file), "status": "incomplete"})
    return run_dir, plan_file


def _changed(**edits) -> dict:
    data = json.loads(json.dumps(PLAN))
    for dotted, value in edits.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value
    return data


def test_the_run_s_own_plan_resumes_even_with_the_plan_file_edited(tmp_path):
    run_dir, plan_file = _run_dir(tmp_path)
    _write(plan_file, _changed(variants__1__num_steps=7, run__max_tokens=64))
    resumed = resume_plan(run_dir)
    assert resumed.plan.variant("eagle").num_steps == 3 and resumed.plan.run.max_tokens == 32
    assert resumed.file_differs == ["variants[eagle].num_steps: 3 -> 7", "run.max_tokens: 32 -> 64"]
    # redacted values are taken from the plan file, never passed on as "<redacted>"
    assert resumed.plan.target.env["HF_TOKEN"] == "hf_secret_value"
    assert resumed.plan.variant("eagle").extra_args == ["--api-key", "sk-live-1234"]
    assert resumed.plan.source_path == plan_file


def test_a_gone_plan_file_still_resumes_unless_a_secret_is_needed(tmp_path):
    data = _changed(target__env={"OMP_NUM_THREADS": "4"}, variants__1__extra_args=[])
    run_dir, plan_file = _run_dir(tmp_path, data)
    plan_file.unlink()
    assert resume_plan(run_dir).plan.variant("eagle").num_steps == 3
    (tmp_path / "b").mkdir()
    run_dir, plan_file = _run_dir(tmp_path / "b")
    plan_file.unlink()
    with pytest.raises(InputError) as err:
        resume_plan(run_dir)
    assert err.value.field == "target.env.HF_TOKEN" \
        and "is redacted and the run's plan file is gone" in str(err.value)
    (tmp_path / "c").mkdir()
    run_dir, plan_file = _run_dir(tmp_path / "c")
    plan_file.write_text("name: [unclosed\n")  # broken since: its error is the reason given
    with pytest.raises(InputError) as err:
        resume_plan(run_dir)
    assert err.value.field == "target.env.HF_TOKEN" and f"is redacted and {plan_file}:" in str(err.value)


def test_a_changed_plan_is_refused_with_every_difference_listed(tmp_path):
    run_dir, _ = _run_dir(tmp_path)
    edited = _write(tmp_path / "edited.yaml",
                    _changed(variants__1__num_steps=5, suites__0__prompts__1__text="hm",
                             run__request_timeout_s=30, target__env={"HF_TOKEN": "x"}))
    before = (run_dir / "plan.resolved.json").read_bytes()
    with pytest.raises(InputError) as err:
        resume_plan(run_dir, edited)
    text = str(err.value)
    assert text.startswith(f"{edited}: differs from the plan {run_dir / 'plan.resolved.json'} was measured "
                           "with, in 3 fields that change what is measured")
    assert text.splitlines()[1:] == ['  target.env.OMP_NUM_THREADS: "4" -> (absent)',
                                     "  variants[eagle].num_steps: 3 -> 5",
                                     '  suites[s].prompts[p1].text: "bye now" -> "hm"']
    assert "hf_secret_value" not in text and "request_timeout_s: 600" not in text  # harmless: not listed
    assert (run_dir / "plan.resolved.json").read_bytes() == before


def test_an_unrelated_plan_at_the_same_path_is_refused(tmp_path):
    run_dir, _ = _run_dir(tmp_path)
    other = _changed(variants=[{"name": "base2"}],
                     suites=[{"name": "t", "prompts": [{"id": "q", "text": "x"}]}])
    with pytest.raises(InputError) as err:
        resume_plan(run_dir, _write(tmp_path / "other.yaml", other))
    assert "variants[baseline]: " in str(err.value) and "variants[base2]: (absent) -> " in str(err.value)


def test_a_harmless_change_is_taken(tmp_path):
    run_dir, _ = _run_dir(tmp_path)
    edited = _write(tmp_path / "edited.yaml", _changed(run__request_timeout_s=30, run__retries=2,
                                                       server={"keep_running": True, "startup_timeout_s": 5},
                                                       description="again"))
    resumed = resume_plan(run_dir, edited)
    plan = resumed.plan
    assert (plan.run.request_timeout_s, plan.run.retries, plan.server.keep_running,
            plan.server.startup_timeout_s, plan.description) == (30, 2, True, 5, "again")
    assert plan.variant("eagle").num_steps == 3 and plan.source_path == edited
    assert sorted(resumed.applied) == sorted([
        'description: "" -> "again"', "run.request_timeout_s: 600.0 -> 30.0", "run.retries: 1 -> 2",
        "server.startup_timeout_s: 1800.0 -> 5.0", "server.keep_running: false -> true"])


def test_what_counts_as_harmless():
    assert all(harmless(tuple(p.replace("[*]", "").split("."))) for p in HARMLESS if "[*]" not in p)
    assert harmless(("variants", ("name", "eagle"), "api_key_env"))
    assert not harmless(("run", "max_tokens")) and not harmless(("variants", ("name", "eagle"), "num_steps"))
    assert not harmless(("run", "request_timeout_s_extra"))


def test_a_locked_run_directory_is_refused_naming_the_holder(tmp_path):
    lock = RunDirLock(tmp_path).acquire()
    try:
        with pytest.raises(InputError) as err:
            RunDirLock(tmp_path).acquire()
        assert str(err.value).startswith(f"{tmp_path}: in use by another draftbench (pid {os.getpid()} on ")
    finally:
        lock.release()
    with RunDirLock(tmp_path):  # free again
        pass


def test_the_lock_dies_with_its_holder_and_is_not_inherited(tmp_path):
    """A holder killed outright frees the directory; a child it spawned (a server) never holds the lock."""
    code = ("import subprocess, sys, time; from harness.bench.lock import RunDirLock; "
            f"RunDirLock({str(tmp_path)!r}).acquire(); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(child.pid, flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert holder.stdout is not None
    child = int(holder.stdout.readline())
    try:
        with pytest.raises(InputError, match=f"pid {holder.pid} on "):
            RunDirLock(tmp_path).acquire()
        holder.kill()
        holder.wait()
        with RunDirLock(tmp_path):  # the child (still alive) does not keep it
            assert os.path.exists(f"/proc/{child}")
    finally:
        holder.kill()
        os.kill(child, 9)


def test_attempts_leave_out_the_rows_of_a_cut_phase(tmp_path):
    """Rows of a phase written before its last attempt began are superseded, in every file; other phases'
    rows, and rows written before any attempt was logged, are kept."""
    cols = ["variant", "phase", "request_id", "ok"]
    records = CountingAppender(tmp_path / "requests.csv", cols)
    windows = CountingAppender(tmp_path / "server_windows.csv", ["variant", "phase", "line"])
    log = CsvAppender(tmp_path / "attempts.csv", ATTEMPT_COLUMNS)
    done = done_phases(tmp_path)
    whole = lambda: {"requests.csv": pd.read_csv(tmp_path / "requests.csv")}  # noqa: E731
    records.append({"variant": "v", "phase": "a", "request_id": "p0", "ok": True})
    assert final_tables(tmp_path, whole())["requests.csv"].shape[0] == 1  # no attempts yet: everything
    assert start_attempt(log, done, "v", "b", records, windows, None) == 1
    records.append({"variant": "v", "phase": "b", "request_id": "p0", "ok": False})  # cut here
    windows.append({"variant": "v", "phase": "b", "line": 7})
    assert start_attempt(log, done, "v", "b", records, windows, None) == 2  # the resume
    records.append({"variant": "v", "phase": "b", "request_id": "p0", "ok": True})
    records.append({"variant": "v", "phase": "b", "request_id": "p1", "ok": True})
    windows.append({"variant": "v", "phase": "b", "line": 3})
    for f in (records, windows, log):
        f.close()
    assert records.rows == 4 and CountingAppender(tmp_path / "requests.csv", cols).rows == 4
    tables = {n: pd.read_csv(tmp_path / n) for n in ("requests.csv", "server_windows.csv")}
    final = final_tables(tmp_path, tables)
    assert list(zip(final["requests.csv"].phase, final["requests.csv"].ok, strict=True)) == [
        ("a", True), ("b", True), ("b", True)]
    assert final["server_windows.csv"].line.tolist() == [3]
    assert done_phases(tmp_path).attempts == {("v", "b"): 2}
