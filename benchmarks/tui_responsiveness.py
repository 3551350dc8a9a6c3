"""TUI responsiveness during a 256-stream run: key press -> screen updated, and event-loop lag.

Load, through the path a real run's events take (harness.tui.runproc): a child process writes framed
pickles of core events on a pipe; the TUI side reads them with RunProcess._pump on a thread, folds them in
an EventFeed and posts coalesced messages to the App. The child paces RequestDone at --requests-per-s
(RequestRecords from harness.analysis.records.make_record, 256-token streams), ServerLog for two variants at
--lines-per-s each (real SGLang 0.5.15 Decode/Prefill/access lines from tests/fixtures, every 10 ms) and a
LogWindow per Decode/Prefill line (harness.engines.sglang.logparse.parse_line, as the runner does).
Keys, at human pace, on the headless App (run_test, fixed size): f f (Decode filter), 2 3 4 1 (sections),
? escape (help). Latency: from the key event entering the App to the first frame the compositor renders
with the expected state on screen (App._display is wrapped; headless Textual writes no terminal bytes, so
the wrapper renders them as a terminal driver would). Each section is visited once before measuring: its
first visit composes it, reported apart. A 5 ms sleeper on the event loop measures its own lateness.
At the end the App's live numbers must equal the same events folded directly by ProgressModel (no pipe, no
coalescing), and the logs must end on the last lines sent.

    python benchmarks/tui_responsiveness.py [--quick] [--json OUT] [--presses N] [--profile OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOAD = Path(__file__).resolve().parent / "_tui_load.py"  # the run's process
sys.path.insert(0, str(ROOT))

from _tui_load import COUNTED, VARIANTS  # noqa: E402

# (Textual key, character): f f toggle the Decode filter, 2 3 4 1 switch sections, ? and escape the help
KEYS = list(zip(["f", "f", "2", "3", "4", "1", "question_mark", "escape"], "ff2341?\x1b", strict=True))
TARGET_P95_MS = 100.0


# ---- the TUI side ------------------------------------------------------------------------------------------
def make_run(params: dict[str, Any], post: Any) -> Any:
    from harness.tui.runproc import RunProcess

    class SyntheticRun(RunProcess):
        """RunProcess with _tui_load.py as the child; the pipe, framing and feed are the real ones."""

        def run(self) -> None:
            self.proc = subprocess.Popen(
                [sys.executable, str(LOAD), json.dumps(params)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
            )
            assert self.proc.stdout is not None
            self.end = self._pump(self.proc.stdout.fileno())
            self.proc.wait()
            self.feed.flush()

    run = SyntheticRun("synthetic", (), {}, post=post)
    run.end, run.pushed, push = None, dict.fromkeys(COUNTED, 0), run.feed.push

    def counting_push(e: Any) -> None:
        name = type(e).__name__
        if name == "ServerLog":
            run.pushed["ServerLog lines"] += len(e.lines)
        elif name in run.pushed:
            run.pushed[name] += 1
        push(e)

    run.feed.push = counting_push
    return run


class GcWatch:
    """Collections stop every thread; their pauses are reported next to the key latencies."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []  # (start, seconds, generation)
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((self._start, time.perf_counter() - self._start, info["generation"]))

    def within(self, t0: float, t1: float) -> float:
        return sum(d for t, d, _ in self.pauses if t0 <= t <= t1)


class FrameWatch:
    """Wraps App._display: each frame is turned into terminal bytes, then the awaited state is checked."""

    def __init__(self, app: Any) -> None:
        from textual._compositor import CompositorUpdate

        self.app, self.update_type, self.original = app, CompositorUpdate, app._display
        self.want: tuple[Any, asyncio.Future] | None = None
        self.frames = 0
        app._display = self._display

    def _display(self, screen: Any, renderable: Any) -> None:
        self.original(screen, renderable)
        if renderable is None or self.app._batch_count:
            return
        if isinstance(renderable, self.update_type):
            renderable.render_segments(self.app.console)  # what a real terminal driver writes
        self.frames += 1
        if self.want is not None and screen is self.app.screen:
            check, fut = self.want
            if not fut.done() and check():
                fut.set_result(time.perf_counter())


def expectation(app: Any, key: str) -> Any:
    """What must be on screen after `key` (pressed in KEYS order, so `f` comes on the Servers section)."""
    from harness.tui.dialogs import HelpScreen
    from harness.tui.screens.results import ResultsScreen
    from harness.tui.screens.retrain import RetrainScreen
    from harness.tui.screens.run import RunScreen
    from harness.tui.screens.servers import ServersScreen
    from harness.tui.widgets.log_pane import DECODE_MARK, LogPane

    screens = {
        "1": ServersScreen,
        "2": RunScreen,
        "3": ResultsScreen,
        "4": RetrainScreen,
        "question_mark": HelpScreen,
        "escape": ServersScreen,
    }
    if key in screens:
        return lambda: type(app.screen) is screens[key]
    pane = app.screen.query_one(LogPane)
    want = not pane.decode_only

    def filtered() -> bool:
        shown = pane.visible_lines(pane.current)[-40:]
        return (
            pane.decode_only == want
            and bool(shown)
            and (
                all(DECODE_MARK in ln for ln in shown) if want else any(DECODE_MARK not in ln for ln in shown)
            )
        )

    return filtered


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def stats_ms(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        **{
            f"{n}_ms": round(pct(xs, q) * 1000, 2)
            for n, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
        },
    }


async def wait_until(cond: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.02)


class Presser:
    """Sends a key as the terminal driver would and waits for the frame that shows its effect."""

    def __init__(self, app: Any, watch: FrameWatch, gcw: GcWatch) -> None:
        self.app, self.watch, self.gcw = app, watch, gcw
        self.latencies: dict[str, list[float]] = {}
        self.gc_s: list[float] = []  # GC time inside each press's latency
        self.missed = 0

    async def press(self, key: str, char: str, into: dict[str, list[float]] | None = None) -> None:
        from textual import events

        check = expectation(self.app, key)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.watch.want = (check, fut)
        t0 = time.perf_counter()
        self.app._driver.send_message(events.Key(key, char))
        try:
            t1 = await asyncio.wait_for(fut, timeout=5.0)
            (self.latencies if into is None else into).setdefault(key, []).append(t1 - t0)
            self.gc_s.append(self.gcw.within(t0, t1))
        except TimeoutError:
            self.missed += 1
            await wait_until(check, f"the state after {key}", 30)
        self.watch.want = None


def build(tmp: Path, streams: int) -> Any:
    """The app as the CLI builds it, on a two-variant plan (nothing is started from it)."""
    from harness.inputs.config import load_plan
    from harness.tui.app import build_app

    path = tmp / "plan.yaml"
    drafter = {"name": "d", "path": "demo-models/good-eagle3", "algorithm": "EAGLE3"}
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tui-load",
                "model": {"path": "demo-models/target"},
                "suites": ["smoke"],
                "target": {
                    "host": "local",
                    "simulated": True,
                    "workdir": str(tmp / "work"),
                    "launcher": ["{python}", "-m", "harness.sim"],
                },
                "variants": [
                    {"name": "baseline"},
                    {
                        "name": "eagle3",
                        "num_steps": 3,
                        "eagle_topk": 1,
                        "num_draft_tokens": 4,
                        "drafter": drafter,
                    },
                ],
                "run": {"concurrency": [streams], "max_tokens": 256},
            }
        )
    )
    fleet = SimpleNamespace(preflight=_nothing, stop_all=_nothing, close=_nothing, gpu_memory=_nothing)
    return build_app(
        str(path),
        tmp / "results",
        plan=load_plan(path),
        gpu_poll_s=0,
        fleet_factory=lambda plan, **_: fleet,
        drafter_dirs=[tmp / "drafters"],
    )


async def _nothing(*_: Any, **__: Any) -> list:
    return []


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from harness.tui.widgets.log_pane import LOG_LINES, LogPane

    app = build(tmp, args.streams)
    delivered = {"lines": 0, "progress": 0}

    def hook(m: Any) -> None:  # messages as the App handles them
        name = type(m).__name__
        delivered["lines"] += len(m.lines) if name == "ServerLogLines" else 0
        delivered["progress"] += name == "ProgressUpdated"

    params = {
        "requests_per_s": args.requests_per_s,
        "lines_per_s": args.lines_per_s,
        "streams": args.streams,
        "duration_s": 3600,
        "run_dir": str(tmp / "results" / "bench"),
    }
    lags: list[float] = []
    queue: list[int] = []
    log_max = [0]
    sampling = [True]

    async def sampler(pane: Any) -> None:
        while sampling[0]:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t - 0.005)
            queue.append(app._message_queue.qsize())
            if len(lags) % 20 == 0:
                log_max[0] = max([log_max[0]] + [len(pane.visible_lines(v)) for v in VARIANTS])

    async with app.run_test(size=args.size, message_hook=hook) as pilot:
        await wait_until(lambda: app.plan is not None and app.fleet is not None, "plan loaded", 30)
        watch, gcw = FrameWatch(app), GcWatch()
        presser = Presser(app, watch, gcw)
        run = make_run(params, app.post_message)
        app.run_control.start_run(run)
        pane = app.get_screen("servers").query_one(LogPane)
        warm = min(LOG_LINES, int(args.lines_per_s * 3))  # the logs are full before the first key
        await wait_until(lambda: len(pane.visible_lines(pane.current)) >= warm, "full logs", 60)
        first: dict[str, list[float]] = {}
        for key, char in KEYS[2:]:
            await presser.press(key, char, into=first if key in "234" else {})
            await asyncio.sleep(args.gap_s)
        lag_task = asyncio.create_task(sampler(pane))
        t_start, pushed0, deliv0, frames0 = (
            time.perf_counter(),
            dict(run.pushed),
            dict(delivered),
            watch.frames,
        )
        gc0, presser.gc_s = len(gcw.pauses), []
        prof = None
        if args.profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        keys = [k for k in KEYS if k[0] in args.keys.split(",")] if args.keys else KEYS
        for i in range(args.presses):
            await presser.press(*keys[i % len(keys)])
            await asyncio.sleep(args.gap_s)  # a person reads the screen between keys
        elapsed = time.perf_counter() - t_start
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
        rates = {k: round((run.pushed[k] - pushed0[k]) / elapsed, 1) for k in COUNTED}
        rates["lines reaching the App"] = round((delivered["lines"] - deliv0["lines"]) / elapsed, 1)
        rates["ProgressUpdated messages"] = round((delivered["progress"] - deliv0["progress"]) / elapsed, 2)
        rates["frames"] = round((watch.frames - frames0) / elapsed, 1)
        gc.callbacks.remove(gcw._callback)
        full_gc = [d for _, d, g in gcw.pauses[gc0:] if g == 2]
        sampling[0] = False
        await lag_task
        run.cancel()
        await wait_until(lambda: run.end is not None, "the producer's end", 30)
        end = run.end[2]
        await wait_until(lambda: app.progress == end["snapshot"], "the last progress snapshot", 10)
        await pilot.pause()
        equal = {
            "progress_snapshot": app.progress == end["snapshot"],
            "done": app.progress.done == end["counts"]["RequestDone"],
            "log_tails": all(list(app.log_buffers[v])[-20:] == end["last_lines"][v] for v in VARIANTS),
            "shown_log_tail": pane.visible_lines(pane.current)[-20:] == end["last_lines"][pane.current],
        }

    lat = [x for xs in presser.latencies.values() for x in xs]
    return {
        "config": {
            "streams": args.streams,
            "requests_per_s": args.requests_per_s,
            "variants": len(VARIANTS),
            "lines_per_s_per_variant": args.lines_per_s,
            "presses": args.presses,
            "gap_s": args.gap_s,
            "size": "x".join(map(str, args.size)),
            "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        },
        "key_to_frame": stats_ms(lat),
        "key_to_frame_by_key": {k: stats_ms(v) for k, v in presser.latencies.items()},
        "first_visit_ms": {k: round(v[0] * 1000, 1) for k, v in first.items()},
        "missed_5s": presser.missed,
        "loop_lag": stats_ms(lags),
        "app_queue_max": max(queue, default=0),
        "gc": {
            "full_collections": len(full_gc),
            "full_max_ms": round(max(full_gc, default=0) * 1000, 1),
            "full_total_ms": round(sum(full_gc) * 1000, 1),
            "presses_with_gc_over_20ms": sum(1 for g in presser.gc_s if g > 0.02),
        },
        "delivered_per_s": rates,
        "log_widget_lines": {"max_seen": log_max[0], "bound": LOG_LINES},
        "tui_equals_direct_fold": equal,
        "target_met": pct(lat, 0.95) * 1000 < TARGET_P95_MS and not presser.missed and all(equal.values()),
    }


def report(res: dict[str, Any]) -> None:
    def line(name: str, s: dict[str, float]) -> str:
        return (
            f"{name:<16} p50 {s['p50_ms']:>7} ms  p95 {s['p95_ms']:>7} ms  p99 {s['p99_ms']:>7} ms  "
            f"max {s['max_ms']:>7} ms"
        )

    out = [line("key -> frame", res["key_to_frame"]) + f"  ({res['missed_5s']} missed)"]
    out += ["  " + line(k, s) for k, s in res["key_to_frame_by_key"].items()]
    out.append(
        "first visit (composes the section): "
        + ", ".join(f"{k}: {v} ms" for k, v in res["first_visit_ms"].items())
    )
    out.append(line("event-loop lag", res["loop_lag"]) + f"  App queue max {res['app_queue_max']}")
    g = res["gc"]
    out.append(
        f"full GC: {g['full_collections']} pauses, max {g['full_max_ms']} ms, total {g['full_total_ms']} "
        f"ms; {g['presses_with_gc_over_20ms']} presses waited > 20 ms on GC"
    )
    out.append("per s: " + ", ".join(f"{n} {v}" for n, v in res["delivered_per_s"].items()))
    out.append(
        f"Log widget lines: max {res['log_widget_lines']['max_seen']} (bound "
        f"{res['log_widget_lines']['bound']}); TUI == direct fold: {res['tui_equals_direct_fold']}"
    )
    out.append(f"target p95 < {TARGET_P95_MS:.0f} ms: {'met' if res['target_met'] else 'NOT met'}")
    print("\n".join(out), file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 presses (under 40 s in all)")
    ap.add_argument("--presses", type=int, default=None, help="key presses (default 200, --quick 40)")
    ap.add_argument("--gap-s", type=float, default=0.2, help="pause between key presses")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests-per-s", type=float, default=300.0)
    ap.add_argument("--lines-per-s", type=float, default=1000.0, help="per server log (two servers)")
    ap.add_argument("--size", type=lambda s: tuple(int(x) for x in s.split("x")), default=(160, 48))
    ap.add_argument("--keys", help="press only these of the cycle, e.g. f or question_mark,escape")
    ap.add_argument("--json", metavar="OUT", help="write the results here as JSON")
    ap.add_argument(
        "--profile", metavar="OUT", help="cProfile the event loop's thread while keys are pressed"
    )
    args = ap.parse_args()
    args.presses = args.presses or (40 if args.quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        res = asyncio.run(measure(args, Path(tmp)))
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0 if res["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
