"""draftbench regen / train / jobs end to end on this machine: the stand-in answers, the fake trainer
trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.demo import write_demo_models
from tests.cli_helpers import cli_here

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

PLAN = """\
name: retrain cli
target:
  host: local
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_TIME_SCALE: "0.1", DRAFTBENCH_SIM_STARTUP_S: "0.2"}}
model: {{path: demo-models/target, tp_size: 1}}
server: {{port: auto, startup_timeout_s: 60}}
variants: [{{name: baseline}}]
suites: [smoke]
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command in this process (tests.cli_helpers.cli_here), with this process's HOME."""
    return cli_here(*args, cwd=cwd, env={"HOME": os.environ["HOME"]})


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    write_demo_models(work)
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN.format(python=sys.executable, workdir=json.dumps(str(work))))
    return p


def test_regen_answers_every_user_turn_and_resumes(plan, tmp_path):
    rows = [{"id": "a", "conversations": [{"role": "user", "content": "Hello?"},
                                          {"role": "assistant", "content": "old answer"},
                                          {"role": "user", "content": "And then?"}]},
            {"id": "b", "conversations": [{"from": "human", "value": "Name three rivers."}]}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    res = cli("regen", str(plan), "--input", str(src), "--output", str(out), "--concurrency", "4",
              "--max-tokens", "16", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(got) == {"a", "b"}
    roles = [m["role"] for m in got["a"]["conversations"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert got["a"]["conversations"][1]["content"] != "old answer"  # replaced by the target's own answer
    assert [m["role"] for m in got["b"]["conversations"]] == ["user", "assistant"]
    again = cli("regen", str(plan), "--input", str(src), "--output", str(out), "--results-dir",
                str(tmp_path / "results"), cwd=tmp_path)
    assert again.returncode == 0 and len(out.read_text().splitlines()) == 2  # resumed: nothing re-done


def test_train_follow_and_jobs(plan, tmp_path):
    data = tmp_path / "work" / "train.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "conversations": [
        {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i} " * 8}]})
                            + "\n"
        for i in range(6)))
    results = str(tmp_path / "results")
    res = cli("train", str(plan), "--data", "train.jsonl", "--output-dir", "out", "--epochs", "2",
              "--save-interval", "3", "--log-interval", "1", "--ttt-length", "2", "--era", "script",
              "--launcher", "{python} -m harness.retrain.fake_trainer", "--env",
              "DRAFTBENCH_FAKE_STEP_S=0.01", "--env", f"PYTHONPATH={ROOT}", "--follow", "--results-dir",
              results, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    job_id = res.stdout.strip().splitlines()[-1]
    assert "finished" in res.stderr and "loss" in res.stderr
    listing = cli("jobs", "list", "--results-dir", results, cwd=tmp_path)
    assert listing.returncode == 0 and job_id in listing.stdout and "finished" in listing.stdout
    ckpts = cli("jobs", "checkpoints", job_id, "--results-dir", results, cwd=tmp_path)
    assert ckpts.returncode == 0 and "epoch_" in ckpts.stdout
    missing = cli("jobs", "follow", "--results-dir", results, cwd=tmp_path)
    assert missing.returncode == 2 and "needs a job id" in missing.stderr
