"""Harness overhead per variant against the stand-in, server start-up excluded.

Measures, for each variant of a small local plan:
  ready -> first request: from the moment the server is healthy to the first measured request on the wire
                          (server_info, drafter hash, flush_cache; warmup disabled so it is pure overhead);
  last response -> stop sent: from the end of the last response to the SIGTERM of the process group
                          (server_info, log catch-up, records);
  stop sent -> stopped:   the server's own shutdown until nothing of its group is left (SGLang sleeps 5 s
                          before its crash diagnostics; the stand-in reproduces that, scaled).
Target: the first two at most 1 s each. Timestamps are perf_counter values taken in this process (the records
use the same clock).

    python benchmarks/harness_overhead.py [--variants 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench.runner import run_plan  # noqa: E402
from harness.cli.demo import write_demo_models  # noqa: E402
from harness.common import events as ev  # noqa: E402
from harness.inputs.config import load_plan  # noqa: E402


def make_plan(tmp: Path, n_variants: int) -> Path:
    write_demo_models(tmp / "work")
    variants = [{"name": "baseline"}]
    for i in range(1, n_variants):
        variants.append({"name": f"eagle3-{i}",
                         "drafter": {"name": f"d{i}", "path": "demo-models/good-eagle3",
                                                             "algorithm": "EAGLE3"},
                         "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4})
    plan = {"name": "overhead", "target": {"host": "local", "python": sys.executable, "simulated": True,
                                           "launcher": ["{python}", "-m", "harness.sim"],
                                           "workdir": str(tmp / "work"),
                                           "env": {"DRAFTBENCH_SIM_STARTUP_S": "0.2",
                                                   "DRAFTBENCH_SIM_TIME_SCALE": "0.2"}},
            "model": {"path": "demo-models/target", "tp_size": 1},
            "server": {"port": "auto", "startup_timeout_s": 60},
            "variants": variants, "suites": ["smoke"],
            "run": {"concurrency": [4], "max_tokens": 32, "warmup_requests": 0, "per_request_spec": "off"}}
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


async def measure(plan_path: Path, results: Path) -> dict[str, dict[str, float]]:
    plan = load_plan(plan_path)
    ready: dict[str, float] = {}
    stopped: dict[str, float] = {}
    stopping: dict[str, float] = {}
    first_send: dict[str, float] = {}
    last_end: dict[str, float] = {}
    async for e in run_plan(plan, results_dir=results):
        now = time.perf_counter()
        if isinstance(e, ev.ServerState) and e.state == "ready":
            ready[e.variant] = now
        elif isinstance(e, ev.ServerState) and e.state == "stopping":
            stopping[e.variant] = now
        elif isinstance(e, ev.ServerState) and e.state == "stopped":
            stopped[e.variant] = now
        elif isinstance(e, ev.RequestDone):
            r = e.record
            first_send[r.variant] = min(first_send.get(r.variant, r.t_send), r.t_send)
            last_end[r.variant] = max(last_end.get(r.variant, r.t_end), r.t_end)
    return {v: {"ready_to_first_request_s": first_send[v] - ready[v],
                "last_response_to_stop_sent_s": stopping[v] - last_end[v],
                "stop_sent_to_stopped_s": stopped[v] - stopping[v]} for v in ready if v in stopped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        figures = asyncio.run(measure(make_plan(tmp, args.variants), tmp / "results"))
    print(f"{'variant':<12} {'ready -> first request':>24} {'last response -> stop sent':>28} "
          f"{'stop sent -> stopped (server)':>31}")
    for v, f in figures.items():
        print(f"{v:<12} {f['ready_to_first_request_s'] * 1000:>21.0f} ms "
              f"{f['last_response_to_stop_sent_s'] * 1000:>25.0f} ms "
              f"{f['stop_sent_to_stopped_s'] * 1000:>28.0f} ms")
    worst = max(max(f["ready_to_first_request_s"], f["last_response_to_stop_sent_s"])
                for f in figures.values()) if figures else float("nan")
    print(f"worst: {worst * 1000:.0f} ms (target: at most 1000 ms each)")
    if args.json:
        Path(args.json).write_text(json.dumps({"variants": figures, "worst_s": worst}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
