"""A run in its own process (harness.tui.runchild): the TUI side. Events arrive as frames on a pipe and
go through an EventFeed, like a run on a thread; cancelling sends SIGTERM, which the child turns into the
runner's own clean stop.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from textual.message import Message

from harness.tui import messages as msg
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed
from harness.tui.runchild import unframe

STDERR_TAIL = 2000  # characters of the child's stderr shown when it dies without a word


RUN_PLAN = "harness.bench.gate:checked_run_plan"  # the preflight first, then run_plan (as `draftbench run`)
RUN_MULTI = "harness.bench.multinode:run_multi"  # a plan with several targets, as `draftbench run` routes it


class RunProcess:
    """`call` names the core generator (see runchild.CALLS); `args`/`kwargs` are pickled to the child."""

    def __init__(
        self,
        call: str,
        args: tuple,
        kwargs: dict[str, Any],
        *,
        post: Callable[[Message], Any],
        target_factory: Callable[[], Any] | None = None,
        flush_interval: float = FLUSH_INTERVAL_S,
    ) -> None:
        self.call, self.args, self.kwargs = call, args, kwargs
        self.keep_servers = bool(kwargs.get("keep_servers", False))
        self.post = post
        self.target_factory = target_factory
        self.flush_interval = flush_interval
        self.feed = EventFeed(post, source="run")
        self.proc: subprocess.Popen | None = None
        self._cancelled = False

    def run(self) -> None:
        """Blocking (call it on a thread). Ends with exactly one of RunFinished, RunCancelled or
        RunCrashed."""
        try:
            payload = pickle.dumps((self.call, self.args, self.kwargs, self.target_factory))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            self.ended("crashed", f"cannot hand the run to its process: {exc}")
            return
        if self._cancelled:  # cancelled while the Servers section's servers were being stopped
            self.ended("cancelled", "")
            return
        with tempfile.TemporaryFile() as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.tui.runchild"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=False,
            )
            if self._cancelled:
                self.proc.send_signal(signal.SIGTERM)
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(payload)
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            end = self._pump(self.proc.stdout.fileno())
            self.proc.wait()
            self.feed.flush()
            if end is None and self._cancelled:  # SIGTERM before the child could install its handler
                end = ("end", "cancelled", "")
            if end is None:
                err.seek(0)
                tail = err.read().decode("utf-8", "replace")[-STDERR_TAIL:]
                end = ("end", "crashed", f"the run's process exited ({self.proc.returncode}): {tail.strip()}")
        self.ended(end[1], end[2])

    def ended(self, status: str, detail: str) -> None:
        """The run's last word. "done": the runner's own RunDone event already became RunFinished."""
        if status == "cancelled":
            self.post(msg.RunCancelled(self.feed.run_dir))
        elif status == "crashed":
            self.post(msg.RunCrashed(detail, self.feed.run_dir))

    def _pump(self, fd: int) -> tuple | None:
        buf = bytearray()
        last_flush = time.monotonic()
        end = None
        while True:
            ready, _, _ = select.select([fd], [], [], self.flush_interval)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return end
                buf += chunk
                for item in unframe(buf):
                    if item[0] == "event":
                        self.feed.push(item[1])
                    else:
                        end = item
            if time.monotonic() - last_flush >= self.flush_interval:
                self.feed.flush()
                last_flush = time.monotonic()

    def cancel(self) -> None:
        """Thread-safe: SIGTERM to the run's process; the runner stops its servers (unless kept)."""
        self._cancelled = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
