"""Stand-ins for the core's long operations with fixed, scripted events: the TUI's wiring is tested
against these, and against the real runner and fleet on the stand-in server in test_tui_e2e.py."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from harness.analysis.records import RequestRecord, make_record
from harness.client.collect import StreamResult
from harness.common import events as ev
from harness.engines.sglang.logparse import LogWindow

SNAP = Path(__file__).resolve().parent
PLAN_PATH = SNAP / "plan.yaml"
RESULTS = SNAP / "results"
RUN_A = RESULTS / "20250101-120000-snap"
RUN_B = RESULTS / "20250102-090000-snap"
DRAFTERS = SNAP / "drafters"
FAKE_RUN_ID = "20250301-000000-snap"

DECODE = (
    "[2025-01-01 12:00:0{i}] Decode batch, #running-req: 1, #token: 120, token usage: 0.00, "
    "accept len: {al:.2f}, accept rate: 0.60, cuda graph: True, gen throughput (token/s): {tp:.2f}, "
    "#queue-req: 0"
)
OTHER = '[2025-01-01 12:00:0{i}] INFO:     127.0.0.1:5000{i} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def snap_plan() -> Any:
    from harness.inputs.config import load_plan

    return load_plan(PLAN_PATH)


def log_lines(n: int = 4) -> tuple[str, ...]:
    out = []
    for i in range(n):
        out.append(OTHER.format(i=i))
        out.append(DECODE.format(i=i, al=2.0 + 0.25 * i, tp=100.0 + 10 * i))
    return tuple(out)


def record(variant: str, phase: str, i: int, tokens: int = 64) -> RequestRecord:
    """A finished request's record, as the runner makes it: sent at 10 + i s, ended a second later."""
    result = StreamResult(ok=True, error=None, http_status=200, t_send=10.0 + i, t_first=10.5 + i,
                          t_end=11.0 + i, wall_send=1.7e9 + i, chunk_times=[10.5 + i, 11.0 + i],
                          chunk_tokens=[1, tokens - 1], chunk_tokens_exact=True, output_tokens=tokens,
                          prompt_tokens=16, text="ok", finish_reason="length")
    return make_record(run_id=FAKE_RUN_ID, variant=variant, phase=phase, suite="smoke", prompt_id=f"p{i}",
                       category="general", concurrency=1, repeat=1, request_id=f"smoke/p{i}", result=result)


def window(al: float, tp: float, line: int = 1) -> LogWindow:
    return LogWindow(
        line=line,
        time="2025-01-01 12:00:00",
        kind="decode",
        running_req=1,
        accept_len=al,
        accept_rate=0.6,
        gen_throughput=tp,
    )


class FakeFleet:
    """The Fleet API with scripted events; records every call."""

    def __init__(self, plan: Any, *, on_event: Any, results_dir: Any = None, alarms: bool = True) -> None:
        self.plan = plan
        self.on_event = on_event
        self.calls: list[tuple[str, str]] = []
        self.alarms = alarms
        self.up: set[str] = set()

    async def preflight(self) -> list[ev.Alarm]:
        found = (
            [
                ev.Alarm(
                    "weak-eagle3",
                    "warning",
                    "many-draft-tokens",
                    "8 draft tokens with accept rate under 0.2 wastes verify compute",
                )
            ]
            if self.alarms
            else []
        )
        for a in found:
            self.on_event(a)
        return found

    async def start(self, name: str) -> None:
        self.calls.append(("start", name))
        self.on_event(ev.ServerState(name, "starting", 30001, 4242))
        self.on_event(ev.ServerLog(name, log_lines()))
        self.on_event(ev.ServerState(name, "ready", 30001, 4242))
        self.up.add(name)

    async def stop(self, name: str) -> None:
        self.calls.append(("stop", name))
        if name in self.up:
            self.on_event(ev.ServerState(name, "stopping", 30001, 4242))
            self.on_event(ev.ServerState(name, "stopped", 30001, 4242))
            self.up.discard(name)

    async def restart(self, name: str) -> None:
        self.calls.append(("restart", name))
        await self.stop(name)
        await self.start(name)

    async def stop_all(self) -> None:
        for name in list(self.up):
            await self.stop(name)

    async def close(self, *, keep: bool = False) -> None:
        self.calls.append(("close", "keep" if keep else ""))
        if not keep:
            await self.stop_all()

    def live(self) -> list[str]:
        return sorted(self.up)

    async def adopt(self) -> list[str]:
        return []  # no earlier draftbench left a server of the fake running

    async def check(self) -> list:
        self.calls.append(("check", ""))
        return []

    def base_url(self, name: str) -> str | None:
        return None  # no server answers behind the fake: regen starts its own

    async def gpu_memory(self) -> dict[str, int]:
        return {name: 1234 for name in self.up}


class FakeRun:
    """A scripted run_plan: copies RUN_A as its run directory and replays the events of a full run.
    With `block=True` it stops after the first phase started and waits to be cancelled."""

    def __init__(self, *, block: bool = False, source: Path = RUN_A) -> None:
        self.block = block
        self.source = source
        self.calls: list[dict[str, Any]] = []
        self.closed = threading.Event()
        self.waiting = threading.Event()
        self.cancelled = False

    async def __call__(self, plan: Any, *, results_dir: Any, keep_servers: bool, target: Any = None):
        self.calls.append({"plan": plan, "results_dir": results_dir, "keep_servers": keep_servers})
        run_dir = Path(results_dir) / FAKE_RUN_ID
        shutil.copytree(self.source, run_dir)
        total = sum(len(s.prompts) for s in plan.suites) * len(plan.run.concurrency) * len(plan.variants)
        try:
            yield ev.RunStarted(
                FAKE_RUN_ID, str(run_dir), plan.name, tuple(v.name for v in plan.variants), total, True
            )
            done = 0
            for v in plan.variants:
                yield ev.ServerState(v.name, "starting", 30000, 5000)
                yield ev.ServerLog(v.name, log_lines(2))
                yield ev.ServerState(v.name, "ready", 30000, 5000)
                for c in plan.run.concurrency:
                    for s in plan.suites:
                        phase = f"{s.name}@c{c}#r1"
                        yield ev.PhaseStarted(v.name, phase, s.name, c, len(s.prompts))
                        if self.block:
                            self.waiting.set()
                            await asyncio.Event().wait()  # until cancelled
                        for i, _p in enumerate(s.prompts):
                            done += 1
                            yield ev.RequestDone(record(v.name, phase, i), done, total)
                            yield ev.LogWindow(v.name, window(2.0 + 0.1 * i, 100.0 + i), phase)
                        yield ev.PhaseDone(v.name, phase, 1.5, 2.5)
                yield ev.VariantDone(v.name, True)
                yield ev.ServerState(v.name, "stopping", 30000, 5000)
                yield ev.ServerState(v.name, "stopped", 30000, 5000)
            yield ev.RunDone(str(run_dir), True, 0, str(run_dir / "summary.csv"))
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.closed.set()


async def wait_for(pilot: Any, condition: Any, what: str, timeout: float = 15.0, every: float = 0.01) -> None:
    """Let the app run until condition() holds; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await pilot.pause(every)


async def confirm(pilot: Any, answer: str = "y") -> None:
    """Answer the confirmation a destructive key asks for ("y": its first answer, "n": cancel)."""
    from harness.tui.dialogs import ConfirmDialog

    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog), "the confirmation")
    await pilot.press(answer)


class Recorder:
    """message_hook for run_test: each TUI message once (bubbling delivers intents twice)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self._ids: set[int] = set()

    def __call__(self, message: Any) -> None:
        from harness.tui import messages

        if isinstance(message, messages.AppMessage) and id(message) not in self._ids:
            self._ids.add(id(message))
            self.seen.append(message)

    def names(self) -> list[str]:
        return [type(m).__name__ for m in self.seen]

    def of(self, cls: type) -> list[Any]:
        return [m for m in self.seen if isinstance(m, cls)]


def screen_text(app: Any) -> str:
    """What the terminal shows now, without colour: the top screen's rows as plain text (a dialog's too)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
