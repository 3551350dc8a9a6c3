"""Throughput and memory of ``harness.engines.sglang.logparse.parse_file`` (or, with ``--csv``, of
``draftbench parse-log``) on a large synthetic SGLang 0.5.15 log.

    python benchmarks/parse_log.py [--lines 2000000] [--mix all|NAME] [--repeat 3] [--json OUT]
    python benchmarks/parse_log.py --csv [--compare] [--against OLD_LOGCSV.py] ...

``--csv`` measures the CLI instead, end to end: ``draftbench parse-log LOG --csv OUT`` in a fresh
process (interpreter start and imports included), its CPU and wall seconds and its peak RSS (the
process's own VmHWM: a child's ru_maxrss would count the benchmark's RSS at fork time); with
``--compare`` also the objects path it replaced (``write_windows_csv(parse_file(LOG), OUT)``),
checking both write the same bytes. ``--against FILE`` also runs the CLI with
``harness.engines.sglang.logcsv`` loaded from FILE (another version of the module, e.g.
``git show HEAD:harness/engines/sglang/logcsv.py``), its runs taking turns with the current module's so both
meet the same load, and checks the bytes too.

The log is written to a temporary directory in the exact 0.5.15.post1 line formats (see
tests/fixtures/sglang-0.5.15.post1/server-eagle3.log), with tqdm ``\\r`` redraw lines and access
log noise mixed in. How many lines are stats lines depends on the run: a batch-1 EAGLE-3 run prints
mostly Decode lines, a high-concurrency run mostly access-log and Prefill lines, so several mixes
are measured. Speed is the best of ``--repeat`` runs in CPU seconds (wall seconds too; on a shared
machine they mostly measure the neighbours). Memory: ``ru_maxrss`` growth during the parses and the
tracemalloc peak over a quarter and over all of the file (equal peaks = constant memory).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from harness.engines.sglang.logparse import parse_file

# Fractions of (decode, prefill, noise) lines.
MIXES = {
    "decode-heavy": (0.70, 0.10, 0.20),  # batch 1, long outputs
    "mixed": (0.40, 0.20, 0.40),
    "serving": (0.10, 0.30, 0.60),  # many concurrent short requests
    "no-stats": (0.0, 0.0, 1.0),  # cost of skipping everything else
}
_NOISE_WEIGHTS = [60, 25, 14, 1]  # access log, metrics scrape, deprecation warning, tqdm redraws
_NOISE = [
    '[{ts}] INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    '[{ts}] INFO:     127.0.0.1:{port} - "GET /metrics HTTP/1.1" 200 OK',
    "[{ts}] Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
    "Please use '/server_info' instead.",
    "\r  0%|          | 0/12 [00:00<?, ?it/s]\rCapturing batches (bs=16 avail_mem=69.74 GB):   8%|▊"
    "         | 1/12 [00:40<07:23, 40.33s/it]\rCapturing batches (bs=14 avail_mem=69.68 GB):  17%|█▋"
    "        | 2/12 [00:40<01:34, 10.52s/it]",
]


def write_log(path: Path, lines: int, mix: tuple[float, float, float], seed: int = 0) -> int:
    """Write ``lines`` synthetic log lines; returns the number of stats lines written."""
    rng = random.Random(seed)
    p_decode, p_prefill, _ = mix
    stats = 0
    base = time.mktime((2026, 11, 29, 10, 0, 0, 0, 0, -1))
    buf: list[str] = []
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for i in range(lines):
            ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(base + i // 200))
            r = rng.random()
            if r < p_decode:
                bs = rng.randint(1, 48)
                accept = 1 + rng.random() * 3
                buf.append(
                    f"[{ts}] Decode batch, #running-req: {bs}, #token: {bs * rng.randint(60, 4000)}, "
                    f"token usage: {rng.random():.2f}, accept len: {accept:.2f}, "
                    f"accept rate: {(accept - 1) / 3:.2f}, cuda graph: {bs <= 32}, "
                    f"gen throughput (token/s): {rng.uniform(50, 9000):.2f}, #queue-req: {rng.randint(0, 5)}"
                )
                stats += 1
            elif r < p_decode + p_prefill:
                buf.append(
                    f"[{ts}] Prefill batch, #new-seq: {rng.randint(1, 4)}, "
                    f"#new-token: {rng.randint(1, 8192)}, "
                    f"#cached-token: {rng.randint(0, 512)}, token usage: {rng.random():.2f}, "
                    f"#running-req: {rng.randint(0, 48)}, #queue-req: {rng.randint(0, 5)}, "
                    f"#pending-token: 0, "
                    f"cuda graph: False, input throughput (token/s): {rng.uniform(1, 90000):.2f}"
                )
                stats += 1
            else:
                noise = rng.choices(_NOISE, _NOISE_WEIGHTS)[0]
                buf.append(noise.format(ts=ts, port=rng.randint(30000, 60000)))
            if len(buf) >= 10000:
                f.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            f.write("\n".join(buf) + "\n")
    return stats


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _traced_peak_mib(path: Path, stop_after: int | None) -> float:
    tracemalloc.start()
    for n, _ in enumerate(parse_file(path), 1):
        if stop_after is not None and n >= stop_after:
            break
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def measure(path: Path, lines: int, stats: int, *, repeat: int, traced: bool) -> dict[str, float | int]:
    rss_before = _maxrss_mib()
    cpu = wall = float("inf")
    for _ in range(repeat):  # best of N: the fastest run is the least disturbed by other processes
        cpu0, wall0 = time.process_time(), time.perf_counter()
        windows = 0
        for _ in parse_file(path):
            windows += 1
        cpu = min(cpu, time.process_time() - cpu0)
        wall = min(wall, time.perf_counter() - wall0)
    if windows != stats:
        raise SystemExit(f"parsed {windows} windows, wrote {stats} stats lines")
    # CPU time is the headline figure: on a shared 2-core box wall time mostly measures the neighbours.
    result: dict[str, float | int] = {
        "lines": lines,
        "windows": windows,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "lines_per_cpu_s": round(lines / cpu),
        "lines_per_wall_s": round(lines / wall),
        "windows_per_cpu_s": round(windows / cpu),
        "mib_per_cpu_s": round(path.stat().st_size / 2**20 / cpu, 1),
        "maxrss_mib": round(_maxrss_mib(), 1),
        "maxrss_growth_mib": round(_maxrss_mib() - rss_before, 1),
    }
    if traced:
        result["traced_peak_quarter_mib"] = round(_traced_peak_mib(path, stats // 4), 2)
        result["traced_peak_full_mib"] = round(_traced_peak_mib(path, None), 2)
    return result


# What the children run: the CLI as `python -m harness.cli` runs it; the objects path that
# `parse-log --csv` used before harness.engines.sglang.logcsv (--compare); the CLI with
# harness.engines.sglang.logcsv loaded from another file (--against).
_CLI = "import runpy; runpy.run_module('harness.cli', run_name='__main__')"
_OBJECTS_PATH = ("import sys; from harness.engines.sglang.logparse import parse_file, write_windows_csv; "
                 "print(write_windows_csv(parse_file(sys.argv[1]), sys.argv[2]), "
                 "file=sys.stderr)")  # fmt: skip
_AGAINST = ("import importlib.util, sys; "
            "spec = importlib.util.spec_from_file_location('harness.engines.sglang.logcsv', sys.argv[1]); "
            "module = sys.modules['harness.engines.sglang.logcsv'] = importlib.util.module_from_spec(spec); "
            "spec.loader.exec_module(module); from harness import cli; "
            "sys.exit(cli.main(sys.argv[2:]))")  # fmt: skip
# A child's ru_maxrss counts its parent's RSS at fork time (Linux carries the forked copy's high
# water mark across exec), so each child prints its own peak, VmHWM, as it exits.
_PEAK = ("import atexit, sys; atexit.register(lambda: print('VmHWM', *[line.split()[1] for line in "
         "open('/proc/self/status') if line.startswith('VmHWM:')], file=sys.stderr)); ")  # fmt: skip


def _run_child(code: str, args: list[str]) -> tuple[float, float, float]:
    """CPU seconds, wall seconds and peak RSS (MiB) of ``python -c code *args`` run to completion."""
    argv = [sys.executable, "-c", _PEAK + code, *args]
    with tempfile.TemporaryFile() as err:
        wall0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)  # the child's own rusage, unlike RUSAGE_CHILDREN
        wall = time.perf_counter() - wall0
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        message = err.read().decode(errors="replace")
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(args)} exited {child.returncode}: {message.strip()[-2000:]}")
    peak = [line.split()[1:] for line in message.splitlines() if line.startswith("VmHWM")]
    rss = int(peak[-1][0]) / 1024 if peak and peak[-1] else usage.ru_maxrss / 1024  # KiB either way
    return usage.ru_utime + usage.ru_stime, wall, rss


def measure_cli(path: Path, lines: int, stats: int, *, repeat: int, compare: bool,
                quarter: Path | None = None,
                against: Path | None = None) -> dict[str, float | int]:  # fmt: skip
    """``quarter``: the same mix at a quarter of the lines, whose peak RSS shows memory is constant."""
    out = path.with_suffix(".csv")
    other = path.with_suffix(".against.csv")
    runs, other_runs = [], []
    for _ in range(repeat):
        runs.append(_run_child(_CLI, ["parse-log", str(path), "--csv", str(out)]))
        if against is not None:
            other_runs.append(
                _run_child(_AGAINST, [str(against), "parse-log", str(path), "--csv", str(other)])
            )
    with open(out, "rb") as f:
        rows = sum(1 for _ in f) - 1
    if rows != stats:
        raise SystemExit(f"parse-log wrote {rows} rows, the log has {stats} stats lines")
    cpu, wall, rss = min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)
    result: dict[str, float | int] = {
        "lines": lines, "windows": rows, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
        "lines_per_cpu_s": round(lines / cpu), "lines_per_wall_s": round(lines / wall),
        "peak_rss_mib": round(rss, 1),
    }  # fmt: skip
    if against is not None:
        if not filecmp.cmp(out, other, shallow=False):
            raise SystemExit(f"{against} and harness.engines.sglang.logcsv wrote different CSV for "
                             f"{path.name}")
        cpu = min(r[0] for r in other_runs)
        result |= {"against_cpu_s": round(cpu, 3), "against_lines_per_cpu_s": round(lines / cpu),
                   "against_peak_rss_mib": round(max(r[2] for r in other_runs), 1)}  # fmt: skip
        other.unlink()
    if quarter is not None:
        quarter_csv = quarter.with_suffix(".csv")
        _, _, rss = _run_child(_CLI, ["parse-log", str(quarter), "--csv", str(quarter_csv)])
        result["peak_rss_quarter_mib"] = round(rss, 1)
    if compare:
        before = path.with_suffix(".objects.csv")
        cpu, wall, rss = _run_child(_OBJECTS_PATH, [str(path), str(before)])
        if not filecmp.cmp(out, before, shallow=False):
            raise SystemExit(f"parse-log and the objects path wrote different CSV for {path.name}")
        result |= {"objects_cpu_s": round(cpu, 3), "objects_lines_per_cpu_s": round(lines / cpu),
                   "objects_lines_per_wall_s": round(lines / wall),
                   "objects_peak_rss_mib": round(rss, 1)}  # fmt: skip
        before.unlink()
    out.unlink()
    return result


def _print_cli(results: dict[str, dict[str, float | int]], args: argparse.Namespace) -> None:
    print(f"draftbench parse-log --csv on {args.lines:,} lines, best of {args.repeat} "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f})")  # fmt: skip
    head = f"{'mix':<14}{'stats':>6}{'lines/cpu-s':>13}{'lines/wall-s':>14}{'peak RSS MiB':>14}"
    head += f"{'against: lines/cpu-s':>22}{'peak RSS MiB':>14}" if args.against else ""
    print(head + (f"{'before: lines/cpu-s':>21}{'peak RSS MiB':>14}" if args.compare else ""))
    for name, r in results.items():
        share = 100 * int(r["windows"]) / int(r["lines"])
        line = f"{name:<14}{share:>5.0f}%{r['lines_per_cpu_s']:>13,}{r['lines_per_wall_s']:>14,}" \
            f"{r['peak_rss_mib']:>14}"
        if args.against:
            line += f"{r['against_lines_per_cpu_s']:>22,}{r['against_peak_rss_mib']:>14}"
        if args.compare:
            line += f"{r['objects_lines_per_cpu_s']:>21,}{r['objects_peak_rss_mib']:>14}"
        print(line)
    for name, r in results.items():
        if "peak_rss_quarter_mib" in r:
            print(f"peak RSS ({name}): {r['peak_rss_quarter_mib']} MiB on {args.lines // 4:,} lines, "
                  f"{r['peak_rss_mib']} MiB on {args.lines:,}")  # fmt: skip


def _print_parse_file(results: dict[str, dict[str, float | int]], args: argparse.Namespace) -> None:
    print(f"parse_file on {args.lines:,} lines, best of {args.repeat} "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"{'mix':<14}{'stats':>6}{'lines/cpu-s':>13}{'lines/wall-s':>14}{'windows/cpu-s':>15}"
          f"{'MiB/cpu-s':>11}{'maxrss MiB':>12}{'growth':>8}")  # fmt: skip
    for name, r in results.items():
        share = 100 * int(r["windows"]) / int(r["lines"])
        print(
            f"{name:<14}{share:>5.0f}%{r['lines_per_cpu_s']:>13,}{r['lines_per_wall_s']:>14,}"
            f"{r['windows_per_cpu_s']:>15,}{r['mib_per_cpu_s']:>11}{r['maxrss_mib']:>12}"
            f"{r['maxrss_growth_mib']:>8}"
        )
    for name, r in results.items():
        if "traced_peak_full_mib" in r:
            print(
                f"tracemalloc peak ({name}): {r['traced_peak_quarter_mib']} MiB over 1/4 of the file, "
                f"{r['traced_peak_full_mib']} MiB over all of it"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--mix", choices=["all", *MIXES], default="all")
    ap.add_argument("--repeat", type=int, default=3, help="parse each file N times, report the best")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--no-tracemalloc", action="store_true", help="skip the (slow) tracemalloc passes")
    ap.add_argument("--csv", action="store_true", help="measure `draftbench parse-log LOG --csv OUT` instead")
    ap.add_argument(
        "--compare", action="store_true", help="with --csv: also time the objects path it replaced"
    )
    ap.add_argument("--against", type=Path, metavar="LOGCSV_PY",
                    help="with --csv: also time the CLI with harness.engines.sglang.logcsv "
                    "loaded from this file")  # fmt: skip
    args = ap.parse_args(argv)

    mixes = list(MIXES) if args.mix == "all" else [args.mix]
    results: dict[str, dict[str, float | int]] = {}
    with tempfile.TemporaryDirectory(prefix="draftbench-bench-") as tmp:
        for i, name in enumerate(mixes):
            path = Path(tmp) / f"{name}.log"
            stats = write_log(path, args.lines, MIXES[name])
            if args.csv:
                quarter = None
                if i == 0:
                    quarter = Path(tmp) / "quarter.log"
                    write_log(quarter, args.lines // 4, MIXES[name])
                results[name] = measure_cli(path, args.lines, stats, repeat=args.repeat, compare=args.compare,
                                            quarter=quarter, against=args.against)  # fmt: skip
            else:
                traced = not args.no_tracemalloc and i == 0
                results[name] = measure(path, args.lines, stats, repeat=args.repeat, traced=traced)
            path.unlink()

    if args.csv:
        _print_cli(results, args)
    else:
        _print_parse_file(results, args)
    if args.json:
        meta = {
            "lines": args.lines,
            "repeat": args.repeat,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "measured": "draftbench parse-log --csv" if args.csv else "parse_file",
        }
        Path(args.json).write_text(json.dumps({**meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
