"""Per-request acceptance read on the timed requests where the engine returns it (SGLang >= 0.5.19:
`sglext.spec_tokens_details`; vLLM >= 0.29.0: `metrics.speculative_decoding`), no untimed probe then, and
the probe kept for SGLang 0.5.13-0.5.18; one run per side on both stand-ins (docs/metrics.md)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.acceptance import AGREE_TOLERANCE
from harness.analysis.engines_table import window_weights
from harness.bench.runner import run_plan
from harness.cli.demo import write_demo_models
from harness.inputs.config import load_plan

PLAN = """\
name: per-request acceptance
target:
  host: local
  python: {python}
  workdir: {workdir}
  simulated: true
  sglang: {{launcher: ["{{python}}", "-m", "harness.sim"], version: {sglang}}}
  vllm: {{launcher: ["{{python}}", "-m", "harness.sim.vllm", "serve"], version: {vllm}}}
  env: {env}
model:
  path: demo-models/target
server:
  port: auto
  max_running_requests: 8
  decode_log_interval: 5
  startup_timeout_s: 60
variants:
  - name: sgl-base
  - name: vllm-base
    engine: vllm
  - name: sgl-eagle3
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
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
      - {{id: b, category: chat, text: "Tell me about tea."}}
      - {{id: c, category: math, text: "What is 17 * 23? Show the steps."}}
      - {{id: d, category: chat, text: "Name three rivers of Europe."}}
run:
  concurrency: [2]
  max_tokens: 160
  ignore_eos: true
  warmup_requests: 0
  repeats: 1
  phase_sizing: false
  min_steady_s: 0
  lossless_audit: false
"""


async def _run(tmp_path: Path, sglang: str, vllm: str) -> tuple[Path, list]:
    workdir = tmp_path / "work"
    write_demo_models(workdir)
    # vLLM logs its SpecDecoding line per time interval (10 s on a real server), not per phase: the draws
    # after a phase's last full interval reach the log after the phase ends, untagged. At 0.2 s that tail
    # was a large enough share of these short phases to move the log's accept length past the 5 % the
    # sources must agree within (2.50 against 2.78 in 1 of 6 runs under load); at 0.05 s it no longer does
    env = {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": "0.03",
           "DRAFTBENCH_SIM_VLLM_LOG_INTERVAL_S": "0.05", "DRAFTBENCH_SIM_SGLANG_VERSION": sglang,
           "DRAFTBENCH_SIM_VLLM_VERSION": vllm}
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(python=sys.executable, workdir=json.dumps(str(workdir)), sglang=sglang,
                                vllm=vllm, env=json.dumps(env)))
    events = []
    async with contextlib.aclosing(run_plan(load_plan(path), results_dir=tmp_path / "results")) as evs:
        async for e in evs:
            events.append(e)
    assert events[-1].complete
    return Path(events[-1].run_dir), events


def _probed(run_dir: Path, variant: str) -> int:
    probe = run_dir / "spec_probe.csv"
    return int((pd.read_csv(probe)["variant"] == variant).sum()) if probe.exists() else 0


def _metas(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "variants.jsonl").read_text().splitlines()
    return {json.loads(x)["variant"]: json.loads(x) for x in lines}


def _agree(a: float, b: float) -> bool:
    return abs(a / b - 1.0) <= AGREE_TOLERANCE


async def test_timed_requests_carry_acceptance_on_releases_that_return_it(tmp_path):
    run_dir, _ = await _run(tmp_path, "0.5.19", "0.33.0")
    reqs = pd.read_csv(run_dir / "requests.csv")
    s = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    meta = _metas(run_dir)
    for variant, field in (("sgl-eagle3", "sglext"), ("vllm-eagle3", "metrics")):
        mine = reqs[reqs.variant == variant]
        assert meta[variant]["per_request_spec"] == "stream"
        # every timed request carried its own stats, named by the field they came in; no untimed pass
        assert len(mine) == 4 and (mine.spec_source == field).all() and _probed(run_dir, variant) == 0
        for hist, verify, correct in zip(mine.spec_histogram, mine.spec_verify_ct, mine.spec_correct_drafts,
                                         strict=True):
            counts = [int(x) for x in hist.split()]
            assert sum(counts) == verify and sum(i * n for i, n in enumerate(counts)) == correct
        row = s.loc[variant]
        assert row.accept_len_source == "requests" and row.spec_source == field
        assert row.accept_len == row.accept_len_requests
        # the same draws, counted by the server: its log (and vLLM's /metrics delta) agree. SGLang logs per
        # decode steps, tagged with the phase; vLLM per time interval, so the draws after the phase's last
        # full interval reach its log after the phase, untagged (under load the phase's own windows were
        # 2.50 and 2.98 against 2.78): its log is read whole, this server having served this phase alone
        if variant == "sgl-eagle3":
            assert _agree(row.accept_len_requests, row.accept_len_log)
            assert bool(row.accept_sources_agree)
        else:
            assert _agree(row.accept_len_requests, _whole_log_accept_len(run_dir, variant))
    assert _agree(s.loc["vllm-eagle3", "accept_len_requests"], s.loc["vllm-eagle3", "accept_len_server"])


def _whole_log_accept_len(run_dir: Path, variant: str) -> float:
    """The accept length of every SpecDecoding line the variant's server logged, tagged or not, each line's
    draws weighted alike (harness.analysis.engines_table.window_weights: vLLM's lines have no batch)."""
    w = pd.read_csv(run_dir / "server_windows.csv")
    w = w[(w.variant == variant) & (w.kind == "decode") & w.accept_len.notna()]
    assert len(w) >= 2
    weights = window_weights(w)
    return float((w.accept_len * weights).sum() / weights.sum())


async def test_older_releases_keep_the_probe_or_the_servers_counters(tmp_path):
    run_dir, _ = await _run(tmp_path, "0.5.15.post1", "0.28.0")
    reqs = pd.read_csv(run_dir / "requests.csv")
    s = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    meta = _metas(run_dir)
    assert reqs.spec_source.isna().all() and reqs.spec_verify_ct.isna().all()  # nothing in the timed streams
    # SGLang 0.5.15: per-request stats only non-streaming, so the untimed probe replays the phase's prompts
    assert meta["sgl-eagle3"]["per_request_spec"] == "meta_info" and _probed(run_dir, "sgl-eagle3") == 4
    sgl = s.loc["sgl-eagle3"]
    assert sgl.spec_source == "probe" and sgl.accept_len_probe > 1.5
    # the stand-in's replay draws anew (a real greedy server accepts alike): the table takes the probe only
    # where it agrees with the timed pass's own counter
    agrees = _agree(sgl.accept_len_probe, sgl.accept_len_server)
    assert sgl.accept_len_source == ("probe" if agrees else "server")
    # vLLM 0.28: no per-request stats at all (the flag is not passed: 0.28 would refuse it); /metrics deltas
    assert meta["vllm-eagle3"]["per_request_spec"] == "off" and _probed(run_dir, "vllm-eagle3") == 0
    assert "--per-request-spec-decode-metrics" not in meta["vllm-eagle3"]["launch_command"]
    vl = s.loc["vllm-eagle3"]
    assert vl.accept_len_source == "server" and pd.isna(vl.spec_source) and vl.accept_len_server > 1.5


@pytest.mark.parametrize("version, refused", [("0.28.0", True), ("0.29.0", False)])
def test_the_vllm_stand_in_knows_the_flag_from_0_29(monkeypatch, version, refused):
    from harness.sim.vllm import args

    monkeypatch.setenv("DRAFTBENCH_SIM_VLLM_VERSION", version)
    argv = ["serve", "m", "--per-request-spec-decode-metrics", "summary"]
    if refused:
        with pytest.raises(SystemExit):
            args.parse(argv)
    else:
        assert args.parse(argv).per_request_spec_decode_metrics == "summary"


def test_the_vllm_stand_in_refuses_the_flag_without_speculation():
    """config/vllm.py (0.29.0-0.34.0): the flag with no --speculative-config stops the server at start."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "harness.sim.vllm", "serve", "m",
                           "--per-request-spec-decode-metrics", "summary"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "requires speculative decoding" in proc.stderr
