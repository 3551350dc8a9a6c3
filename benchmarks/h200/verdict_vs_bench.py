"""Is draftbench's c8 verdict consistent with sglang.bench_serving's spread on the same servers?

python3 benchmarks/h200/verdict_vs_bench.py RUN_DIR BENCH_DIR [--json]
  RUN_DIR    a draftbench run of baseline and eagle3 at concurrency 8 with repeats (decide.sh serve: the
             servers were `endpoint:` variants, so bench_serving measured exactly the same processes)
  BENCH_DIR  bench_serving-<variant>-r<round>.jsonl, each bench_serving's --output-file

Prints a markdown table; --json prints the same numbers as one JSON object (tests read it from the fixture).
bench_serving's throughput is its `output_throughput` (completed output tokens / benchmark duration);
draftbench's per repeat is the phase's output tokens (server usage) / phase wall. The bench_serving
speedups are every pairing of a baseline round with an eagle3 round; "consistent" means every one of
them lies inside draftbench's interval, and draftbench's verdict is not contradicted by them (a
"faster" verdict with a bench_serving pairing at or below 1.00, or a "slower" one at or above it).
"""

from __future__ import annotations

import json
import sys
from itertools import product
from pathlib import Path

import pandas as pd

CONCURRENCY = 8
VARIANTS = ("baseline", "eagle3")


def bench_rounds(bench: Path, variant: str) -> list[float]:
    """bench_serving's output tok/s per round on one server, rounds in order; a round with no result is left
    out."""
    rates = []
    for path in sorted(bench.glob(f"bench_serving-{variant}-r*.jsonl")):
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        if lines:
            rates.append(float(json.loads(lines[-1])["output_throughput"]))
    return rates


def compare(run: Path, bench: Path) -> dict:
    ph = pd.read_csv(run / "phases.csv")
    ph = ph[ph.concurrency == CONCURRENCY]
    s = pd.read_csv(run / "summary.csv")
    s = s[s.concurrency == CONCURRENCY].set_index("variant")
    out: dict = {"draftbench": {}, "bench_serving": {}}
    for v in VARIANTS:
        rows = ph[ph.variant == v].sort_values("repeat")
        out["draftbench"][v] = [float(t) for t in rows.output_tokens / rows.wall_s]
        out["bench_serving"][v] = bench_rounds(bench, v)
    e = s.loc["eagle3"]
    out["verdict"] = {k: (None if pd.isna(e[k]) else (float(e[k]) if k != "verdict" else str(e[k])))
                      for k in ("speedup", "speedup_ci_low", "speedup_ci_high", "verdict")}
    out["verdict"]["ci_method"] = str(e["ci_method"])
    pairs = [b2 / b1 for b1, b2 in product(out["bench_serving"]["baseline"], out["bench_serving"]["eagle3"])]
    same_round = [b2 / b1 for b1, b2 in zip(out["bench_serving"]["baseline"], out["bench_serving"]["eagle3"],
                                            strict=False)]
    out["bench_serving_speedups"] = pairs
    out["bench_serving_same_round"] = same_round
    spread = {tool: {v: (max(x) / min(x) - 1 if len(x) > 1 else None) for v, x in per.items()}
              for tool, per in (("draftbench", out["draftbench"]), ("bench_serving", out["bench_serving"]))}
    out["spread"] = spread
    v = out["verdict"]
    lo, hi, verdict = v["speedup_ci_low"], v["speedup_ci_high"], v["verdict"]
    inside = bool(pairs) and lo is not None and all(lo <= p <= hi for p in pairs)
    contradicted = (verdict == "faster" and any(p <= 1.0 for p in pairs)) or \
        (verdict == "slower" and any(p >= 1.0 for p in pairs))
    out["inside_ci"] = inside
    out["contradicted"] = contradicted
    out["consistent"] = bool(pairs) and inside and not contradicted
    return out


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def main(argv: list[str]) -> None:
    c = compare(Path(argv[0]), Path(argv[1]))
    if "--json" in argv[2:]:
        print(json.dumps(c, indent=1))
        return
    print(f"| variant (c={CONCURRENCY}) | draftbench tok/s per repeat | spread | bench_serving "
          "tok/s per round | spread |")
    print("|---|---|---|---|---|")
    for v in VARIANTS:
        print(f"| {v} | {', '.join(f'{x:.0f}' for x in c['draftbench'][v])} | "
              f"{pct(c['spread']['draftbench'][v])} | "
              f"{', '.join(f'{x:.0f}' for x in c['bench_serving'][v]) or 'none'} | "
              f"{pct(c['spread']['bench_serving'][v])} |")
    d = c["verdict"]
    ci = "-" if d["speedup_ci_low"] is None else f"{d['speedup_ci_low']:.2f}-{d['speedup_ci_high']:.2f}"
    pairs = ", ".join(f"{p:.2f}x" for p in c["bench_serving_speedups"]) or "none"
    print(f"\ndraftbench: {d['speedup']:.2f}x ({ci}, {d['ci_method']}), verdict {d['verdict']}")
    print(f"bench_serving, every baseline round against every eagle3 round: {pairs}")
    print(f"consistent: {c['consistent']} (inside the interval: {c['inside_ci']}; "
          f"verdict contradicted: {c['contradicted']})")


if __name__ == "__main__":
    main(sys.argv[1:])
