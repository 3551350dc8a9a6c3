"""The cost of a plan on one node against several: the same plan run over 1 and over N loopback sshd nodes
(stand-in servers), wall time of each, their ratio, and the prediction of the cost model in
docs/scale-out.md from the measured start-up and phase times of the one-node run.

    python benchmarks/multinode.py [--nodes 2] [--variants 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench.multinode import assign, run_multi  # noqa: E402
from harness.cli.demo import write_demo_models  # noqa: E402
from harness.inputs.config import load_plan  # noqa: E402
from tests.faults_helpers import reap_servers  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402

PLAN = """\
name: cost
target:
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_STARTUP_S: "1.0", DRAFTBENCH_SIM_TIME_SCALE: "0.5"}}
targets: {targets}
model: {{path: demo-models/target, tp_size: 1}}
server: {{port: auto, max_running_requests: 16, decode_log_interval: 5, startup_timeout_s: 60}}
variants:
{variants}
suites:
  - name: s
    prompts: [{prompts}]
run: {{concurrency: [4], max_tokens: 96, warmup_requests: 0, repeats: 1}}
"""


def variants(n: int) -> str:
    out = ["  - name: baseline"]
    for i in range(n):
        out.append("  - "
                   f"{{name: v{i}, drafter: {{name: d{i}, path: demo-models/good-eagle3, "
                   f"algorithm: EAGLE3}}, "
                   f"num_steps: {2 + i % 3}, eagle_topk: 1, num_draft_tokens: {3 + i % 3}}}")
    return "\n".join(out)


async def timed(plan) -> tuple[float, Path]:
    t0 = time.perf_counter()
    run_dir = None
    async with contextlib.aclosing(run_multi(plan, results_dir=plan_results)) as events:
        async for e in events:
            run_dir = getattr(e, "run_dir", run_dir) if type(e).__name__ == "RunDone" else run_dir
    return time.perf_counter() - t0, Path(run_dir)


def node_costs(run_dir: Path) -> dict[str, float]:
    """Per variant: start-up plus measured phases, from the run's own records (the model's inputs)."""
    import pandas as pd

    state = json.loads((run_dir / "nodes.json").read_text())
    cost: dict[str, float] = {}
    for entry in state["nodes"]:
        d = run_dir / entry["dir"]
        metas = [json.loads(x) for x in (d / "variants.jsonl").read_text().splitlines()]
        phases = pd.read_csv(d / "phases.csv")
        for m in metas:
            cost[m["variant"]] = float(m.get("startup_s") or 0) \
                + float(phases[phases.variant == m["variant"]].wall_s.sum())
    return cost


def predict(cost: dict[str, float], share: dict[str, list[str]], per_server_s: float) -> float:
    """max over nodes of the node's own sequence: each server's start-up + phases + the fixed per-server
    cost."""
    return max(sum(cost[v] + per_server_s for v in names) for names in share.values() if names)


async def main() -> None:
    global plan_results
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--variants", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        nodes = [start_sshd(tmp / f"sshd-{i}", alias=f"node-{i}") for i in range(args.nodes)]
        home = tmp / "home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        (home / ".ssh" / "config").write_text("\n".join(Path(n.ssh_config).read_text() for n in nodes))
        (home / ".ssh" / "known_hosts").write_text("".join(Path(n.known_hosts).read_text() for n in nodes))
        os.environ["HOME"] = str(home)
        write_demo_models(tmp / "work")
        prompts = ", ".join(f"{{id: p{i}, text: 'Explain item {i} in a few sentences.'}}" for i in range(8))
        try:
            out = {}
            for n in (1, args.nodes):
                path = tmp / f"plan{n}.yaml"
                targets = "[" + ", ".join(f"node-{i}" for i in range(n)) + "]"
                path.write_text(PLAN.format(python=sys.executable, workdir=json.dumps(str(tmp / "work")),
                                            targets=targets, variants=variants(args.variants),
                                            prompts=prompts))
                plan_results = tmp / f"results{n}"
                wall, run_dir = await timed(load_plan(path))
                out[n] = (wall, run_dir, load_plan(path))
            (w1, d1, p1), (wn, _, pn) = out[1], out[args.nodes]
            cost = node_costs(d1)
            share1 = assign(p1, ["node-0"])
            # stop, info, flush per server
            fixed = (w1 - sum(cost.values())) / sum(len(v) for v in share1.values())
            share_n = assign(pn, [f"node-{i}" for i in range(args.nodes)])
            pred = predict(cost, share_n, fixed)
            result = {"variants": args.variants, "nodes": args.nodes, "wall_1_node_s": round(w1, 2),
                      f"wall_{args.nodes}_nodes_s": round(wn, 2), "ratio": round(wn / w1, 3),
                      "per_server_fixed_s": round(fixed, 2), "predicted_s": round(pred, 2),
                      "prediction_error_pct": round(100 * (pred - wn) / wn, 1)}
            print(json.dumps(result, indent=2))
            if args.json:
                Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        finally:
            reap_servers(tmp)
            for n in nodes:
                n.stop()


plan_results: Path = Path("results")

if __name__ == "__main__":
    asyncio.run(main())
