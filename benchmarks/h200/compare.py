"""draftbench vs sglang.bench_serving on the same real servers (docs/real-gpu.md).

python3 benchmarks/h200/compare.py RUN_DIR OUT_DIR   -> a markdown table on stdout
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

CONCURRENCY = 8


def bench(out: Path, variant: str) -> dict:
    path = out / f"bench_serving-{variant}.jsonl"
    if not path.exists():
        return {}
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    return json.loads(lines[-1]) if lines else {}


def pct(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "-"
    return f"{(a / b - 1) * 100:+.1f}%"


def fmt(x, spec="{:.1f}") -> str:
    return "-" if x is None or x != x else spec.format(x)


def main(run_dir: str, out_dir: str) -> None:
    run, out = Path(run_dir), Path(out_dir)
    s = pd.read_csv(run / "summary.csv")
    w = pd.read_csv(run / "server_windows.csv")
    print(f"| variant (c={CONCURRENCY}) | draftbench tok/s | bench_serving tok/s | diff | draftbench TTFT p50 ms "
          "| bench_serving median TTFT ms | diff | accept len: requests / server_info / log | "
          "bench_serving accept len | log gen throughput (mean of phase windows) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, r in s[s.concurrency == CONCURRENCY].iterrows():
        b = bench(out, r["variant"])
        phase_windows = w[(w.variant == r["variant"]) & (w.phase.astype(str).str.contains(f"@c{CONCURRENCY}#"))
                          & (w.kind == "decode")]
        gen = phase_windows["gen_throughput"].mean() if len(phase_windows) else None
        print(f"| {r['variant']} | {fmt(r['tok_s'])} | {fmt(b.get('output_throughput'))} | "
              f"{pct(r['tok_s'], b.get('output_throughput'))} | {fmt(r['ttft_p50_ms'])} | "
              f"{fmt(b.get('median_ttft_ms'))} | {pct(r['ttft_p50_ms'], b.get('median_ttft_ms'))} | "
              f"{fmt(r['accept_len_requests'], '{:.3f}')} / {fmt(r['accept_len_server'], '{:.3f}')} / "
              f"{fmt(r['accept_len_log'], '{:.3f}')} | {fmt(b.get('accept_length'), '{:.3f}')} | {fmt(gen)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
