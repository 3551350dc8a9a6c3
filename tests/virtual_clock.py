"""An asyncio event loop on a virtual clock, for the stand-in's scheduler run in-process.

The loop never waits: when no callback is ready it moves its clock to the next timer at once. The
stand-in's scheduler (harness.sim.sglang.engine) sleeps each step's modelled time on the loop's clock and
times its Decode windows with `time.perf_counter`; `run_on_virtual_clock` points both at the virtual clock,
so every window lasts exactly its steps' modelled times (with the seeded step noise, if any) however busy the
machine is, and a run of many steps takes no wall time. Only for schedulers that do no network I/O.
"""

from __future__ import annotations

import asyncio
import selectors
import types
from collections.abc import Coroutine
from typing import Any, TypeVar
from unittest import mock

from harness.sim.sglang import engine as engine_mod

T = TypeVar("T")


class _JumpSelector(selectors.DefaultSelector):
    """Polls without blocking; with nothing ready, the loop's clock jumps by the time it would have waited."""

    def __init__(self, loop: VirtualClockLoop):
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer pending: only I/O or another thread can wake the loop
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.advance(timeout)
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_JumpSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run_on_virtual_clock(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a VirtualClockLoop, with the stand-in scheduler's clocks on it."""
    loop = VirtualClockLoop()
    clock = types.SimpleNamespace(perf_counter=loop.time, time=lambda: 1.7e9 + loop.time())
    with mock.patch.object(engine_mod, "time", clock), asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(coro)
