"""One plan, both engines: an SGLang baseline + EAGLE-3 variant and a vLLM baseline + EAGLE-3 variant of the
same drafter on the two stand-ins, locally and over the loopback sshd; one table across engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.cli.demo import GOOD_PROFILE, write_demo_models
from tests.sshd import sshd_missing_reason, start_sshd

PLAN = """\
name: both engines
target:
  host: {host}
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  vllm_launcher: ["{{python}}", "-m", "harness.sim.vllm", "serve"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_STARTUP_S: "0.2", DRAFTBENCH_SIM_TIME_SCALE: "0.4",
        DRAFTBENCH_SIM_VLLM_LOG_INTERVAL_S: "0.3"}}
model:
  path: demo-models/target
  served_model_name: demo-target
server:
  port: auto
  max_running_requests: 16
  decode_log_interval: 5
  startup_timeout_s: 60
variants:
  - name: sgl-base
  - name: sgl-eagle3
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
  - name: vllm-base
    engine: vllm
  - name: vllm-eagle3
    engine: vllm
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
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
  max_tokens: 96
  warmup_requests: 1
  repeats: 1
  min_steady_s: 0  # speedups and accept lengths, no verdict: a phase is its 4 x concurrency requests
"""
EXPECTED = 1 + GOOD_PROFILE[0] + GOOD_PROFILE[0] * GOOD_PROFILE[1] \
    + GOOD_PROFILE[0] * GOOD_PROFILE[1] * GOOD_PROFILE[2]


def _run(tmp_path: Path, host: str, env: dict[str, str]) -> Path:
    """`draftbench run` on the plan; also checks the printed table names each row's engine and baseline."""
    workdir = tmp_path / "target work"
    write_demo_models(workdir)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(host=host, python=sys.executable, workdir=json.dumps(str(workdir))))
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(plan), "--results-dir",
                           str(results)], capture_output=True, text=True,
                          env={**env, "PYTHONUNBUFFERED": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SGLang and vLLM stand-ins" in proc.stdout
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("variant"))
    assert header.split()[:3] == ["variant", "engine", "vs"]
    return Path(proc.stdout.strip().splitlines()[-1])


def _check(run_dir: Path) -> None:
    s = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert s.loc["sgl-eagle3", "engine"] == "sglang" and s.loc["vllm-eagle3", "engine"] == "vllm"
    # each engine's variant against its own engine's baseline, and the table says which
    assert s.loc["sgl-eagle3", "compared_with"] == "sgl-base"
    assert s.loc["vllm-eagle3", "compared_with"] == "vllm-base"
    for v in ("sgl-eagle3", "vllm-eagle3"):
        assert s.loc[v, "accept_len"] == pytest.approx(EXPECTED, rel=0.2)
        assert s.loc[v, "speedup"] > 1.2
    # vLLM: run-scoped accept length from /metrics counter deltas, and from the per-request stats
    assert s.loc["vllm-eagle3", "accept_len_server"] == pytest.approx(EXPECTED, rel=0.2)
    assert s.loc["vllm-eagle3", "accept_len_requests"] == pytest.approx(
        s.loc["vllm-eagle3", "accept_len_server"], rel=0.1)
    # the cross-engine row compares the two baselines
    cross = s.loc["vllm-base vs sgl-base"]
    assert cross["engine"] == "vllm vs sglang" and cross["compared_with"] == "sgl-base"
    assert cross["speedup"] == pytest.approx(s.loc["vllm-base", "tok_s"] / s.loc["sgl-base", "tok_s"])
    assert cross["status"] == "cross-engine"
    # ...and the EAGLE-3 arms, the same drafter config on both engines; each ratio with its interval
    spec = s.loc["vllm-eagle3 vs sgl-eagle3"]
    assert spec["compared_with"] == "sgl-eagle3" and spec["status"] == "cross-engine"
    assert spec["speedup"] == pytest.approx(s.loc["vllm-eagle3", "tok_s"] / s.loc["sgl-eagle3", "tok_s"])
    for row in (cross, spec):
        assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]
        assert str(row["verdict_reason"]).split(":")[0] in {"faster", "slower", "equivalent", "undecided"}
    assert pd.isna(spec["output_match"])  # the vLLM row's own comparison with its baseline is not the cross's
    # break-even next to accept length and speedup on both engines (vLLM's from end-to-end tok/s)
    for v in ("sgl-eagle3", "vllm-eagle3"):
        assert s.loc[v, "break_even_accept_len"] > 1.0
    meta = {json.loads(x)["variant"]: json.loads(x)
            for x in (run_dir / "variants.jsonl").read_text().splitlines()}
    assert meta["vllm-eagle3"]["engine"] == "vllm" and meta["vllm-eagle3"]["engine_version"] == "0.33.0"
    assert '"method":"eagle3"' in " ".join(meta["vllm-eagle3"]["launch_command"])
    assert meta["sgl-eagle3"]["engine"] == "sglang"
    phases = pd.read_csv(run_dir / "phases.csv")
    vp = phases[phases.variant == "vllm-eagle3"]
    assert (vp["server_spec_drafts"] > 0).all()
    assert all(len(str(p).split()) == 3 for p in vp["server_accept_per_pos"])
    assert "Application startup complete." in (run_dir / "logs" / "vllm-base.log").read_text()


@pytest.mark.slow
def test_both_engines_locally(tmp_path):
    _check(_run(tmp_path, "local", dict(os.environ)))


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")
def test_both_engines_over_ssh(tmp_path):
    sshd = start_sshd(tmp_path / "sshd")
    try:
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        (home / ".ssh" / "config").write_text(Path(sshd.ssh_config).read_text())
        (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
        _check(_run(tmp_path, sshd.alias, {**os.environ, "HOME": str(home)}))
    finally:
        sshd.stop()


async def test_fleet_starts_a_vllm_arm_with_its_own_engine_version(tmp_path):
    """The TUI's long-lived servers: a vLLM variant of a mixed plan is launched by vLLM's argv for vLLM's
    version (not the plan's SGLang version) and comes up ready on the vLLM stand-in."""
    import asyncio

    from harness.cli.demo import ready_demo_models
    from harness.inputs.config import load_plan
    from harness.serve.fleet import Fleet

    plan = ready_demo_models(load_plan(Path(__file__).parent.parent / "plans" / "demo-engines.yaml"),
                             tmp_path / "results")
    plan.target.env = {"DRAFTBENCH_SIM_STARTUP_S": "0.1"}
    fleet = Fleet(plan, on_event=lambda e: None, results_dir=tmp_path / "results")
    try:
        status = await asyncio.wait_for(fleet.start("vllm-eagle3"), 60)
        assert status.state == "ready"
        assert fleet.versions == {"sglang": "0.5.15.post1", "vllm": "0.33.0"}
        # the run directory's log is a copy the log follower writes as it tails the server's own: it can
        # lag the readiness probe by a poll (CI saw it end at the line before the server listened)
        log_copy = fleet.session_dir / "logs" / "vllm-eagle3.log"
        deadline = asyncio.get_running_loop().time() + 20
        while "Application startup complete." not in log_copy.read_text() \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        log = log_copy.read_text()
        assert "Application startup complete." in log and "vLLM API server version 0.33.0" in log
    finally:
        await fleet.close()
