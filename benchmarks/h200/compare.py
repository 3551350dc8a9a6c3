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
    waves(run, out)


def waves(run: Path, out: Path) -> None:
    """Per-request TTFT, request by request in sending order, when bench_serving wrote its details
    (--output-details): both tools send the same prompts in the same order, so a closed loop of
    CONCURRENCY moves through the same waves; the input lengths show the pairing is right."""
    r = pd.read_csv(run / "requests.csv")
    rows = []
    for variant in ("baseline", "eagle3"):
        b = bench(out, variant)
        if not b.get("ttfts"):
            continue
        d = r[(r.variant == variant) & (r.concurrency == CONCURRENCY)].sort_values("t_send")
        if len(d) != len(b["ttfts"]):
            print(f"\n{variant}: {len(d)} draftbench requests vs {len(b['ttfts'])} bench_serving ones: not paired")
            continue
        for i, (row, ttft, ilen) in enumerate(zip(d.itertuples(), b["ttfts"], b["input_lens"], strict=True)):
            rows.append({"variant": variant, "wave": i // CONCURRENCY, "same_len": row.prompt_tokens == ilen,
                         "draftbench": row.ttft_ms, "bench_serving": ttft * 1000,
                         "send_offset_ms": (row.t_send - d.t_send.iloc[i // CONCURRENCY * CONCURRENCY]) * 1000})
    if not rows:
        return
    t = pd.DataFrame(rows)
    print(f"\nrequests paired by position: {int(t.same_len.sum())} of {len(t)} with equal input lengths")
    print("\n| variant | wave | draftbench TTFT mean ms | bench_serving TTFT mean ms | diff | draftbench send spread ms |")
    print("|---|---|---|---|---|---|")
    for (variant, wave), g in t.groupby(["variant", "wave"], sort=False):
        print(f"| {variant} | {wave + 1} | {g.draftbench.mean():.1f} | {g.bench_serving.mean():.1f} | "
              f"{pct(g.draftbench.mean(), g.bench_serving.mean())} | {g.send_offset_ms.max():.2f} |")
    for variant, g in t.groupby("variant", sort=False):
        print(f"| {variant} | all: mean / median | {g.draftbench.mean():.1f} / {g.draftbench.median():.1f} | "
              f"{g.bench_serving.mean():.1f} / {g.bench_serving.median():.1f} | "
              f"{pct(g.draftbench.mean(), g.bench_serving.mean())} / "
              f"{pct(g.draftbench.median(), g.bench_serving.median())} | |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
