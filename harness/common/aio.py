"""Turning a long coroutine that emits events into an async generator of those events; waiting for tasks
without eating the caller's own cancellation.

`contextlib.suppress(asyncio.CancelledError)` around `await task` is wrong wherever the awaiting task can
itself be cancelled meanwhile: the CancelledError it swallows may be the caller's, and the caller then goes
on as if nobody had asked it to stop (a cancelled run that measures its next variant). `reap` takes the
awaited tasks' outcomes and lets the caller's cancellation through; `finish` completes cleanup and reports
a cancellation for the caller to re-raise. tests/test_cancellation.py tests both and checks that no module
of the harness suppresses CancelledError itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

Emit = Callable[[Any], None]


async def drain(start: Callable[[Emit], Awaitable[None]], *, name: str) -> AsyncIterator[Any]:
    """Run `start(emit)` as a task and yield what it emits, in order, until it ends (its exception is
    re-raised). Closing the generator cancels the task and waits for its cleanup (servers get stopped)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    task = asyncio.create_task(start(queue.put_nowait), name=name)
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
                continue
            getter.cancel()
            while not queue.empty():
                yield queue.get_nowait()
            task.result()
            return
    finally:
        if not task.done():
            task.cancel()
            # its cleanup (servers stopped) runs to the end; a second cancellation meanwhile is re-raised
            if await finish(reap(task)):
                raise asyncio.CancelledError


async def reap(*tasks: asyncio.Future[Any] | None, timeout: float | None = None) -> None:
    """Wait until `tasks` (typically just cancelled) have ended, at most `timeout` seconds, and take their
    outcomes: their own CancelledError or exception is expected and dropped. A cancellation of the calling
    task is not: it propagates, as from any other await."""
    pending = [t for t in tasks if t is not None]
    if not pending:
        return
    try:
        await asyncio.wait(pending, timeout=timeout)
    finally:
        for t in pending:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: no "exception was never retrieved" at exit


async def finish(aw: Awaitable[Any]) -> bool:
    """Await `aw` to its end even when this task is cancelled meanwhile: cleanup (stopping servers) must
    finish what it started, or a server is left on the GPU. Returns whether a cancellation arrived, so that
    the caller re-raises it once the rest of its cleanup is done."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            return cancelled
        except asyncio.CancelledError:
            if task.cancelled():  # the work itself was cancelled: nothing left to wait for
                return True
            cancelled = True
