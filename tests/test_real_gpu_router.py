"""Regeneration through the real sglang-router in front of two real SGLang 0.5.15.post1 servers sharing
one H200 (benchmarks/h200/router.sh, docs/scale-out.md): the fixtures are the workers' own logs and the
run's servers.jsonl. Re-read here with draftbench's own code: the per-worker progress counts every row
exactly once, both workers served, the second started only after the first was ready (they share the GPU),
and every process group draftbench started was stopped."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.engines import get_engine
from harness.retrain.router import WorkerStats

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "router"
READY = "The server is fired up and ready to roll!"


def _stats(name: str) -> tuple[WorkerStats, list[str]]:
    """WorkerStats fed exactly as RouterFleet._on_lines feeds it, from the real log."""
    lines = (FIX / f"{name}.log").read_text().splitlines()
    stats, engine = WorkerStats(name), get_engine("sglang")
    for i, text in enumerate(lines, 1):
        if '"POST /v1/chat/completions' in text and '" 200' in text:
            stats.requests += 1
        w = engine.parse_log_line(text, i)
        if w is not None and w.kind == "decode":
            stats.running, stats.gen_tok_s = w.running_req, w.gen_throughput
    return stats, lines


def test_both_real_workers_served_and_every_row_was_answered_once():
    rows = json.loads((FIX / "regen-rows.json").read_text())
    assert rows == {"rows": 96, "unique_ids": 96, "status": ["success"]}
    w0, _ = _stats("baseline-w0")
    w1, _ = _stats("baseline-w1")
    assert w0.requests > 0 and w1.requests > 0 and w0.requests + w1.requests == rows["rows"]
    assert w0.running and w0.gen_tok_s and w1.running and w1.gen_tok_s  # real Decode windows were parsed
    # the last progress line draftbench printed says the same as the logs
    last = (FIX / "regen.log").read_text().strip().splitlines()[-2]
    assert f"baseline-w0: {w0.requests} answered" in last and f"baseline-w1: {w1.requests} answered" in last


def _stamp(line: str) -> str:
    return re.match(r"\[([0-9-]+ [0-9:]+)\]", line).group(1)


def test_workers_sharing_the_gpu_started_one_after_the_other_and_all_were_stopped():
    _, l0 = _stats("baseline-w0")
    _, l1 = _stats("baseline-w1")
    ready0 = _stamp(next(x for x in l0 if READY in x))
    first1 = next(_stamp(x) for x in l1 if x.startswith("[2"))
    assert first1 >= ready0  # w1's first log line comes after w0 was ready
    entries = [json.loads(x) for x in (FIX / "servers.jsonl").read_text().splitlines()]
    started = {e["pgid"]: e for e in entries if e["state"] == "started"}
    assert {e["variant"] for e in started.values()} == {"baseline-w0", "baseline-w1", "router"}
    assert {e["pgid"] for e in entries if e["state"] == "stopped"} == set(started)
    router = next(e for e in started.values() if e["variant"] == "router")
    urls = router["argv"][router["argv"].index("--worker-urls") + 1:]
    assert urls == [f"http://127.0.0.1:{e['port']}" for e in started.values() if e["variant"] != "router"]
    for e in started.values():
        if e["variant"] != "router":  # both on the one GPU, each with its memory share
            assert e["argv"][e["argv"].index("--mem-fraction-static") + 1] == "0.26"
