"""The benchmark runs on its own thread with its own event loop: UI rendering on the App's loop cannot
delay a network read, so the timestamps the core takes are not distorted by the TUI.
Events reach the App through an EventFeed whose `post` is the App's thread-safe `post_message`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from harness.common.aio import reap
from harness.tui import messages as msg
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed

if TYPE_CHECKING:
    from harness.inputs.config import Plan

RunEvents = Callable[..., AsyncIterator[Any]]  # harness.bench.runner.run_plan's signature


class RunThread:
    def __init__(
        self,
        run_events: RunEvents,
        plan: Plan,
        *,
        results_dir: str | Path,
        keep_servers: bool,
        post: Callable[[Message], Any],
        target_factory: Callable[[], Any] | None = None,
        flush_interval: float = FLUSH_INTERVAL_S,
    ) -> None:
        self.run_events = run_events
        self.plan = plan
        self.results_dir = results_dir
        self.keep_servers = keep_servers
        self.post = post
        self.target_factory = target_factory
        self.flush_interval = flush_interval
        self.feed = EventFeed(post, source="run")
        self._cancel = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        """Blocking: the whole run. Ends with exactly one of RunFinished, RunCancelled or RunCrashed."""
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            self.post(msg.RunCancelled(self.feed.run_dir))
        except Exception as exc:  # the run's own failures arrive as events; this is a crash of the run
            self.post(msg.RunCrashed(f"{type(exc).__name__}: {exc}", self.feed.run_dir))

    def cancel(self) -> None:
        """Thread-safe. Cancels the run task; the runner then stops its servers (unless kept)."""
        with self._lock:
            self._cancel.set()
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)

    async def _main(self) -> None:
        with self._lock:
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        if self._cancel.is_set():
            raise asyncio.CancelledError
        pump = asyncio.create_task(self.feed.pump(self.flush_interval))
        target = self.target_factory() if self.target_factory else None
        kwargs: dict[str, Any] = {"results_dir": self.results_dir, "keep_servers": self.keep_servers}
        if target is not None:
            kwargs["target"] = target
        try:
            events = self.run_events(self.plan, **kwargs)
            try:
                async for event in events:
                    self.feed.push(event)
            finally:
                await events.aclose()
        finally:
            pump.cancel()
            await reap(pump)
            if not pump.cancelled() and (exc := pump.exception()) is not None:
                raise exc  # the feed broke: a crash of the run, as before
            self.feed.flush()
            if target is not None:  # the runner closes only targets it opened itself
                with contextlib.suppress(Exception):
                    await target.close()
