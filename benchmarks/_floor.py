"""The machine's scheduling floor: how late would an ideal, zero-cost client on this CPU stamp an event?

A loop pinned to the client's CPU reads perf_counter as fast as it can; every interval longer than 50 µs
between two reads is a gap: time in which the CPU did not run the loop (the hypervisor paused the vCPU,
an interrupt, another task). An event arriving at a uniformly random instant inside a gap of length g
waits out the rest of it, so the gap adds a delay uniform on [0, g] and covers g of the wall time; an
event arriving while the loop runs waits 0. `added_delay_quantile` takes the quantiles of that mixture.

The loop naps 100 µs after every millisecond of spinning: at real-time priority a task that never sleeps is
stopped by the kernel for ~50 ms each second (the real-time bandwidth limit, sched_rt_runtime_us), a stall the
jitter client, which sleeps in epoll, never meets. A nap counts as running; its overshoot beyond the run's
smallest one counts as a gap.

    python benchmarks/_floor.py --cpu 0 --seconds 5 [--rt]      # one JSON line
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GAP_S = 50e-6  # shorter intervals between two reads count as the loop running
SPIN_S = 1e-3
NAP_S = 100e-6


def spin(seconds: float) -> tuple[list[float], float]:
    """(gaps in seconds, wall seconds) of a perf_counter loop that runs for `seconds`."""
    pc, sleep = time.perf_counter, time.sleep
    gaps: list[float] = []
    overshoots: list[float] = []
    least = float("inf")
    t0 = last = pc()
    end, nap_at = t0 + seconds, t0 + SPIN_S
    while True:
        t = pc()
        if t - last > GAP_S:
            gaps.append(t - last)
        last = t
        if t >= nap_at:
            if t >= end:
                break
            sleep(NAP_S)
            t = pc()
            over = t - last - NAP_S
            least = min(least, over)
            if over > GAP_S:
                overshoots.append(over)
            last, nap_at = t, t + SPIN_S
    gaps += [o - least for o in overshoots if o - least > GAP_S]
    return gaps, last - t0


def added_delay_quantile(gaps: list[float], wall: float, q: float) -> float:
    """The q-quantile of the delay added to an event arriving uniformly in [0, wall): 0 outside the gaps,
    uniform on [0, g] inside a gap of length g. Solves sum(max(0, g - x)) = (1 - q) * wall for x."""
    target = (1.0 - q) * wall
    desc = sorted(gaps, reverse=True)
    if sum(desc) <= target:
        return 0.0
    top = 0.0
    for k, g in enumerate(desc, 1):
        top += g
        x = (top - target) / k  # the solution if exactly the k longest gaps exceed x
        if k == len(desc) or x >= desc[k]:
            return max(x, 0.0)
    return 0.0


def steal_ticks() -> dict[str, int]:
    """Steal ticks (USER_HZ) per /proc/stat line: 'cpu' for the machine, 'cpuN' per CPU; {} where absent."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            parts = line.split()
            if parts and parts[0].startswith("cpu") and len(parts) > 8:
                out[parts[0]] = int(parts[8])
    except (OSError, ValueError):
        return {}
    return out


def summarize(gaps: list[float], wall: float) -> dict:
    big = [g for g in gaps if g > 1e-3]
    return {"floor_duration_s": wall,
            "floor_p50_us": added_delay_quantile(gaps, wall, 0.50) * 1e6,
            "floor_p99_us": added_delay_quantile(gaps, wall, 0.99) * 1e6,
            "floor_max_gap_us": max(gaps, default=0.0) * 1e6,
            "floor_gaps_over_1ms_per_s": len(big) / wall,
            "floor_lost_pct_over_1ms": 100 * sum(big) / wall,
            "floor_lost_pct_over_50us": 100 * sum(gaps) / wall}


def measure(seconds: float, cpu: int | None) -> dict:
    """Runs the loop here (already pinned) and adds the steal ticks per second that /proc/stat saw."""
    gc.collect()
    gc.disable()
    s0 = steal_ticks()
    gaps, wall = spin(seconds)
    s1 = steal_ticks()
    gc.enable()
    out = summarize(gaps, wall)
    for key, line in (("floor_steal_ticks_per_s", "cpu"), ("floor_cpu_steal_ticks_per_s", f"cpu{cpu}")):
        out[key] = (s1[line] - s0[line]) / wall if line in s0 and line in s1 else None
    out["floor_realtime"] = hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) == os.SCHED_FIFO
    return out


def run(cpu: int | None, seconds: float, rt: bool = False) -> dict:
    """The floor, measured in a fresh process pinned to `cpu` (at real-time priority with `rt`)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--seconds", str(seconds)] \
        + (["--rt"] if rt else [])
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise SystemExit(f"floor worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _no_timer_slack() -> None:
    """Ordinary tasks' sleeps may end up to 50 µs late (timer slack); ask for 1 ns (Linux only)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
        except (OSError, AttributeError):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cpu", type=int)
    ap.add_argument("--rt", action="store_true", help="SCHED_FIFO, as the jitter client with --rt")
    args = ap.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.rt:
        sys.path.insert(0, str(HERE))
        from _fastserver import realtime

        realtime()
    _no_timer_slack()
    print(json.dumps(measure(args.seconds, args.cpu)), flush=True)


if __name__ == "__main__":
    main()
