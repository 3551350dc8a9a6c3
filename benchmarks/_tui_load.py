"""The run's process for benchmarks/tui_responsiveness.py: paced core events on stdout, framed as
harness.tui.runchild frames them, until SIGTERM; then one end frame carrying what was sent and the same
events folded directly by ProgressModel (what the TUI must end up showing).

    python benchmarks/_tui_load.py '{"requests_per_s": 300, "lines_per_s": 1000, "streams": 256, ...}'
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.common import events as ev  # noqa: E402
from harness.tui.runchild import frame  # noqa: E402
from harness.tui.state import ProgressModel  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "sglang-0.5.15.post1"
VARIANTS = ("baseline", "eagle3")
LOG_SOURCE = {"baseline": "server-baseline.log", "eagle3": "server-eagle3.log"}
COUNTED = ("RequestDone", "ServerLog lines", "LogWindow")
PHASE = "synthetic@c256#r1"
TICK_S = 0.01


def steady_lines(variant: str) -> list[str]:
    """The lines a loaded server repeats: scheduler stats and access log, as captured."""
    text = (FIXTURES / LOG_SOURCE[variant]).read_text()
    marks = ("Decode batch", "Prefill batch", "POST /v1/")
    return [ln for ln in text.splitlines() if any(m in ln for m in marks)]


def record_pool(n: int, streams: int) -> list[Any]:
    """RequestRecords of 256-token streams, 4 tokens a chunk (accept length ~3.2 at temperature 0)."""
    from harness.analysis.records import make_record

    out = []
    for i in range(n):
        t0 = 1000.0 + i * 0.003
        times = [t0 + 0.05 + k * 0.012 for k in range(64)]
        res = SimpleNamespace(
            ok=True,
            error=None,
            http_status=200,
            t_send=t0,
            t_first=times[0],
            t_end=times[-1] + 0.001,
            wall_send=1.7e9 + t0,
            chunk_times=times,
            chunk_tokens=[4] * 64,
            chunk_tokens_exact=True,
            output_tokens=256,
            prompt_tokens=180,
            text="x" * 900,
            finish_reason="length",
            attempts=1,
            spec={"spec_verify_ct": 80, "completion_tokens": 256},
        )
        out.append(
            make_record(
                run_id="bench",
                variant="eagle3",
                phase=PHASE,
                suite="synthetic",
                prompt_id=f"p{i}",
                category="chat",
                concurrency=streams,
                repeat=1,
                request_id=f"r{i}",
                result=res,
            )
        )
    return out


def event_stream(p: dict[str, Any], stop: Any) -> Any:
    """The paced events (a generator: the child writes them, the check folds the same ones)."""
    from harness.engines.sglang.logparse import parse_line

    total = int(p["requests_per_s"] * p["duration_s"])
    yield ev.RunStarted("bench", p["run_dir"], "tui-load", VARIANTS, total, True)
    for i, v in enumerate(VARIANTS):
        yield ev.ServerState(v, "starting", 31000 + i, 4000 + i)
        yield ev.ServerState(v, "ready", 31000 + i, 4000 + i)
    yield ev.PhaseStarted("eagle3", PHASE, "synthetic", p["streams"], total)
    pool = record_pool(512, p["streams"])
    lines = {v: steady_lines(v) for v in VARIANTS}
    sent = {v: 0 for v in VARIANTS}
    done = 0
    t0 = time.perf_counter()
    while not stop() and done < total:
        now = time.perf_counter() - t0
        while done < min(total, int(now * p["requests_per_s"])):
            done += 1
            rec = replace(pool[done % len(pool)], request_id=f"r{done}", t_end=1000.0 + now)
            yield ev.RequestDone(rec, done, total)
        for v in VARIANTS:
            due = int(now * p["lines_per_s"]) - sent[v]
            if due <= 0:
                continue
            src = lines[v]
            batch = [src[(sent[v] + k) % len(src)] for k in range(due)]
            yield ev.ServerLog(v, tuple(batch))  # then its windows, as harness.bench.runner._on_lines does
            for k, text in enumerate(batch):
                w = parse_line(text, sent[v] + k + 1)
                if w is not None:
                    yield ev.LogWindow(v, w, PHASE)
            sent[v] += due
        yield None  # a tick: the writer flushes and sleeps to the next one


def produce(params: str) -> int:
    p = json.loads(params)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    model = ProgressModel()
    counts = dict.fromkeys(COUNTED, 0)
    last: dict[str, list[str]] = {v: [] for v in VARIANTS}
    pending: list[bytes] = []
    next_tick = time.perf_counter()
    for e in event_stream(p, lambda: bool(stopping)):
        if e is None:
            out.write(b"".join(pending))
            out.flush()
            pending.clear()
            next_tick += TICK_S
            time.sleep(max(0.0, next_tick - time.perf_counter()))
            continue
        model.observe(e)
        if isinstance(e, ev.ServerLog):
            counts["ServerLog lines"] += len(e.lines)
            last[e.variant] = (last[e.variant] + list(e.lines))[-20:]
        elif type(e).__name__ in counts:
            counts[type(e).__name__] += 1
        pending.append(frame(("event", e)))
    out.write(
        b"".join(pending)
        + frame(("end", "done", {"snapshot": model.snapshot(), "counts": counts, "last_lines": last}))
    )
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(produce(sys.argv[1]))
