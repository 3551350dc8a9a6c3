"""The whole headless path over a real sshd on 127.0.0.1 with the stand-in as the server:
plan -> start -> replay -> stop -> CSVs, asserted against the stand-in's configured acceptance."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.summary import REQUIRED_COLUMNS
from harness.cli.demo import GOOD_PROFILE, write_demo_models
from tests.sshd import sshd_missing_reason, start_sshd

pytestmark = [pytest.mark.ssh, pytest.mark.slow,
              pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")]

PLAN = """\
name: e2e over ssh
target:
  host: {alias}
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_STARTUP_S: "0.2"}}
model:
  path: demo-models/target
  tp_size: 1
server:
  port: auto
  max_running_requests: 16
  decode_log_interval: 5
  startup_timeout_s: 60
variants:
  - name: baseline
  - name: good
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
  - name: wrong-flag
    drafter: {{name: good2, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    algorithm: EAGLE
    expect: drafter-inert   # deliberately wrong: the preflight notes it instead of stopping the run
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
suites:
  - name: tiny
    prompts:
      - {{id: a, category: code, text: "Write a function that reverses a list."}}
      - {{id: b, category: chat, messages: [{{role: user, content: "Tell me about tea."}}]}}
      - {{id: c, category: math, text: "What is 17 * 23? Show the steps."}}
run:
  concurrency: [2]
  repeats: 1
  max_tokens: 64
  warmup_requests: 1
  phase_sizing: false   # the test counts its requests: one pass of the suite
"""


@pytest.fixture(scope="module")
def ssh_home(tmp_path_factory):
    """A HOME whose ~/.ssh/config and known_hosts point at the loopback sshd: the runner must honour them."""
    sshd = start_sshd(tmp_path_factory.mktemp("sshd"))
    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(Path(sshd.ssh_config).read_text())
    (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
    yield sshd, home
    sshd.stop()


def test_run_plan_over_ssh_with_the_stand_in(ssh_home, tmp_path):
    sshd, home = ssh_home
    workdir = tmp_path / "target work"  # a space on purpose: every path is quoted
    write_demo_models(workdir)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(alias=sshd.alias, python=sys.executable, workdir=json.dumps(str(workdir))))
    results = tmp_path / "results"
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(plan), "--results-dir",
                           str(results)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.parent == results and run_dir.is_dir()
    assert "SIMULATED" in proc.stdout and "good" in proc.stdout

    # records: every measured request exactly once, warmup excluded, tokens from usage
    reqs = pd.read_csv(run_dir / "requests.csv")
    assert len(reqs) == 9
    assert sorted(reqs.groupby("variant").size().tolist()) == [3, 3, 3]
    assert reqs["ok"].all() and not reqs["request_id"].str.startswith("warmup").any()
    assert (reqs["output_tokens"] == 64).all()
    for offs, toks, out in zip(reqs.chunk_offsets_ms, reqs.chunk_tokens, reqs.output_tokens, strict=True):
        assert len(offs.split()) == len(toks.split())
        assert sum(int(t) for t in toks.split()) == out  # exact per-chunk counts from continuous usage
    good = reqs[reqs.variant == "good"]
    assert good["tokens_per_chunk"].mean() > 1.5  # speculation: several tokens per chunk

    # summary: acceptance matches the drafter's configured profile; wrong flag is inert
    s = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert set(REQUIRED_COLUMNS) <= set(s.reset_index().columns)
    expected = 1 + GOOD_PROFILE[0] + GOOD_PROFILE[0] * GOOD_PROFILE[1] \
        + GOOD_PROFILE[0] * GOOD_PROFILE[1] * GOOD_PROFILE[2]
    assert s.loc["good", "accept_len"] == pytest.approx(expected, rel=0.15)
    assert s.loc["good", "accept_len_server"] == pytest.approx(s.loc["good", "accept_len_log"], rel=0.1)
    assert s.loc["wrong-flag", "accept_len_server"] == pytest.approx(1.0, abs=0.01)
    assert s.loc["good", "speedup"] > 1.2
    # break-even from step costs: the verify step over the baseline's decode step at the same batch, and
    # accept length over it predicts the measured speedup (prefill and the tail make up the difference)
    good = s.loc["good"]
    assert good["break_even_accept_len"] == pytest.approx(good["verify_step_ms"] / good["decode_step_ms"],
                                                          rel=1e-6)
    assert good["accept_len"] / good["break_even_accept_len"] == pytest.approx(good["speedup"], rel=0.25)
    assert s.loc["baseline", "speedup"] == pytest.approx(1.0)
    assert s.loc["good", "output_match"] == pytest.approx(1.0)  # greedy: lossless

    # server windows, logs and provenance
    with open(run_dir / "server_windows.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert any(r["variant"] == "good" and r["phase"] == "tiny@c2#r1" and r["accept_len"] for r in rows)
    for v in ("baseline", "good", "wrong-flag"):
        assert "The server is fired up and ready to roll!" in (run_dir / "logs" / f"{v}.log").read_text()
    variants = [json.loads(x) for x in (run_dir / "variants.jsonl").read_text().splitlines()]
    good_meta = next(m for m in variants if m["variant"] == "good")
    assert "--speculative-algorithm" in good_meta["launch_command"]
    assert good_meta["sglang_version"] == "0.5.15.post1" and good_meta["drafter_config_sha256"]
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["status"] == "complete" and prov["target"] == sshd.alias

    # nothing left running on the target; the work directory is private
    servers = [json.loads(x) for x in (run_dir / "servers.jsonl").read_text().splitlines()]
    pgids = {e["pgid"] for e in servers}
    assert len(pgids) == 3
    ps = subprocess.run(["ps", "-A", "-o", "pgid=", "-o", "stat="], capture_output=True, text=True).stdout
    live = {int(p.split()[0]) for p in ps.splitlines() if p.split() and not p.split()[1].startswith("Z")}
    assert not (pgids & live)
    assert (workdir.stat().st_mode & 0o777) == 0o700
