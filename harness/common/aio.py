"""Turning a long coroutine that emits events into an async generator of those events."""

from __future__ import annotations

import asyncio
import contextlib
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
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(task)


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
