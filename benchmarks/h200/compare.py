"""draftbench vs sglang.bench_serving on the same real servers (docs/real-gpu.md).

python3 benchmarks/h200/compare.py RUN_DIR OUT_DIR   -> a markdown table on stdout
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # harness, when run from anywhere

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
    print(f"| variant (c={CONCURRENCY}) | draftbench tok/s | bench_serving tok/s | diff | draftbench TTFT "
          "p50 ms | bench_serving median TTFT ms | diff | accept len: requests / server_info / log | "
          "bench_serving accept len | log gen throughput (mean of phase windows) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, r in s[s.concurrency == CONCURRENCY].iterrows():
        b = bench(out, r["variant"])
        phase_windows = w[(w.variant == r["variant"])
                          & (w.phase.astype(str).str.contains(f"@c{CONCURRENCY}#"))
                          & (w.kind == "decode")]
        gen = phase_windows["gen_throughput"].mean() if len(phase_windows) else None
        print(f"| {r['variant']} | {fmt(r['tok_s'])} | {fmt(b.get('output_throughput'))} | "
              f"{pct(r['tok_s'], b.get('output_throughput'))} | {fmt(r['ttft_p50_ms'])} | "
              f"{fmt(b.get('median_ttft_ms'))} | {pct(r['ttft_p50_ms'], b.get('median_ttft_ms'))} | "
              f"{fmt(r['accept_len_requests'], '{:.3f}')} / {fmt(r['accept_len_server'], '{:.3f}')} / "
              f"{fmt(r['accept_len_log'], '{:.3f}')} | "
              f"{fmt(b.get('accept_length'), '{:.3f}')} | {fmt(gen)} |")
    server_side(run, out)
    waves(run, out)


def bench_rounds(run: Path, out: Path, variant: str) -> list[tuple[dict, Path | None, Path | None]]:
    """bench_serving's runs on one server: (its json, /metrics before, /metrics after); the first writes
    to OUT, a second (REPEATS=2) to the run directory."""
    rounds = []
    for json_dir, tag in ((out, ""), (run, "-rep2")):
        path = json_dir / f"bench_serving-{variant}{tag}.jsonl"
        if not path.exists():
            continue
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        scrapes = [run / f"metrics-bench_serving-{variant}{tag}-{when}.txt" for when in ("before", "after")]
        rounds.append((json.loads(lines[-1]), *(p if p.exists() else None for p in scrapes)))
    return rounds


def server_side(run: Path, out: Path) -> None:
    """Each round of each tool on the same server: tok/s, client TTFT mean, and the server's own TTFT
    over the same requests (SGLang's TTFT histogram, harness.engines.sglang.prom): draftbench records it per
    phase,
    bench_serving's comes from /metrics scraped around it. "outside" = client - server."""
    from harness.engines.sglang.prom import histogram_totals, phase_means

    ph = pd.read_csv(run / "phases.csv")
    r = pd.read_csv(run / "requests.csv")
    has_server = "server_ttft_ms_mean" in ph
    print("\n| variant | tool, round | requests (server count) | tok/s | client TTFT mean / median ms | "
          "server TTFT mean ms | outside the server ms | server queue mean ms |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in ("baseline", "eagle3"):
        for _, row in ph[(ph.variant == variant) & (ph.concurrency == CONCURRENCY)].iterrows():
            mine = r[(r.variant == variant) & (r.phase == row.phase) & (r.ok.astype(str) == "True")]
            srv = row.server_ttft_ms_mean if has_server else None
            print(f"| {variant} | draftbench {row.phase.split('#')[-1]} | {len(mine)} "
                  f"({fmt(row.server_requests if has_server else None, '{:.0f}')}) | "
                  f"{row.output_tokens / row.wall_s:.1f} | {mine.ttft_ms.mean():.1f} / "
                  f"{mine.ttft_ms.median():.1f} | {fmt(srv)} | "
                  f"{fmt(mine.ttft_ms.mean() - srv if srv == srv and srv is not None else None)} | "
                  f"{fmt(row.server_queue_ms_mean if has_server else None)} |")
        for i, (b, before, after) in enumerate(bench_rounds(run, out, variant), 1):
            row = phase_means(*(histogram_totals(p.read_text()) if p else None for p in (before, after)))
            srv = row["server_ttft_ms_mean"]
            print(f"| {variant} | bench_serving r{i} | {b['completed']} "
                  f"({fmt(row['server_requests'], '{:.0f}')}) | {b['output_throughput']:.1f} | "
                  f"{b['mean_ttft_ms']:.1f} / {b['median_ttft_ms']:.1f} | {fmt(srv)} | "
                  f"{fmt(b['mean_ttft_ms'] - srv if srv is not None else None)} | "
                  f"{fmt(row['server_queue_ms_mean'])} |")


def waves(run: Path, out: Path) -> None:
    """Per-request TTFT in sending order, first round of each tool, when bench_serving wrote its details
    (--output-details): both send the same prompts in the same order, so a closed loop of CONCURRENCY
    moves through the same waves; the input lengths (bench_serving's leave out the chat template's
    tokens) show the pairing is right."""
    r = pd.read_csv(run / "requests.csv")
    rows = []
    for variant in ("baseline", "eagle3"):
        rounds = bench_rounds(run, out, variant)
        b = rounds[0][0] if rounds else {}
        if not b.get("ttfts"):
            continue
        d = r[(r.variant == variant) & (r.concurrency == CONCURRENCY)]
        d = d[d.repeat == d.repeat.min()].sort_values("t_send")
        if len(d) != len(b["ttfts"]):
            print(f"\n{variant}: {len(d)} draftbench requests vs {len(b['ttfts'])} "
                  "bench_serving ones: not paired")
            continue
        for i, (row, ttft, ilen) in enumerate(zip(d.itertuples(), b["ttfts"], b["input_lens"], strict=True)):
            rows.append({"variant": variant, "wave": i // CONCURRENCY, "len_offset": row.prompt_tokens - ilen,
                         "draftbench": row.ttft_ms, "bench_serving": ttft * 1000,
                         "send_offset_ms":
                             (row.t_send - d.t_send.iloc[i // CONCURRENCY * CONCURRENCY]) * 1000})
    if not rows:
        return
    t = pd.DataFrame(rows)
    offsets = sorted(set(t.len_offset))
    print(f"\nrequests paired by position: input lengths differ by {offsets} token(s) "
          "(one value: the same prompts)")
    print("\n| variant | wave | draftbench TTFT mean ms | bench_serving TTFT mean ms | diff | "
          "draftbench send spread ms |")
    print("|---|---|---|---|---|---|")
    for (variant, wave), g in t.groupby(["variant", "wave"], sort=False):
        print(f"| {variant} | {wave + 1} | {g.draftbench.mean():.1f} | {g.bench_serving.mean():.1f} | "
              f"{pct(g.draftbench.mean(), g.bench_serving.mean())} | {g.send_offset_ms.max():.2f} |")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
