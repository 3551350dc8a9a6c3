"""Core events -> TUI messages. State changes go out at once (in order); the high-rate ones (RequestDone,
ServerLog, LogWindow) are folded and go out on `flush`, which a timer calls a few times a second.
Every message leaves through `post`, which is thread-safe (`App.post_message`), so a feed may live on the
run's own thread and event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from textual.message import Message

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.state import ProgressModel

FLUSH_INTERVAL_S = 0.25
LOG_BATCH_MAX = 2000  # lines kept per variant between flushes; older ones are on disk only


class EventFeed:
    def __init__(self, post: Callable[[Message], Any], *, source: str) -> None:
        self.post = post
        self.source = source  # "run" | "fleet": who owns the servers these events are about
        self.progress = ProgressModel()
        self.run_dir: str | None = None
        self._logs: dict[str, list[str]] = {}
        self._dirty = False

    def push(self, event: object) -> None:
        if isinstance(event, ev.ServerLog):
            buf = self._logs.setdefault(event.variant, [])
            buf.extend(event.lines)
            if len(buf) > LOG_BATCH_MAX:
                del buf[:-LOG_BATCH_MAX]
            return
        changed = self.progress.observe(event)
        if isinstance(event, ev.RequestDone | ev.LogWindow):
            self._dirty = self._dirty or changed
            return
        self.flush()  # everything before a state change reaches the UI before it
        if isinstance(event, ev.RunStarted):
            self.run_dir = event.run_dir
        out = translate(event, self.source)
        if out is not None:
            self.post(out)
        self._dirty = self._dirty or changed

    def flush(self) -> None:
        logs, self._logs = self._logs, {}
        for variant, lines in logs.items():
            if lines:
                self.post(msg.ServerLogLines(variant, tuple(lines)))
        if self._dirty:
            self._dirty = False
            if self.source == "run":  # the Run tab's numbers and plots are the run's only, never the fleet's
                self.post(msg.ProgressUpdated(self.progress.snapshot()))

    async def pump(self, interval: float = FLUSH_INTERVAL_S) -> None:
        """Flush every `interval` seconds until cancelled (run as a task next to the producer)."""
        while True:
            await asyncio.sleep(interval)
            self.flush()


def translate(e: object, source: str) -> Message | None:
    """One state-changing event as its message; None for events that only feed the progress model."""
    if isinstance(e, ev.RunStarted):
        return msg.RunLaunched(e.run_id, e.run_dir, tuple(e.variants), e.total_requests, e.simulated)
    if isinstance(e, ev.ServerState):
        return msg.ServerStateChanged(e.variant, e.state, e.port, e.pgid, e.detail, source)
    if isinstance(e, ev.NodeState):
        return msg.NodeStateChanged(e.node, e.state, tuple(e.variants), e.detail)
    if isinstance(e, ev.PhaseStarted):
        return msg.PhaseBegan(e.variant, e.phase, e.concurrency, e.requests)
    if isinstance(e, ev.PhaseDone):
        return msg.PhaseFinished(e.variant, e.phase, e.wall_s, e.server_accept_len)
    if isinstance(e, ev.PhaseSized):
        from harness.cli.progress import sized_words

        return msg.RunNote(e.variant, f"{e.variant} {e.phase}: {sized_words(e)}")
    if isinstance(e, ev.Look):
        from harness.cli.progress import look_words

        return msg.RunNote("", look_words(e), look=True)
    if isinstance(e, ev.Alarm):
        return msg.AlarmRaised(e.variant, e.severity, e.code, e.message)
    if isinstance(e, ev.VariantDone):
        return msg.VariantFinished(e.variant, e.ok, e.detail)
    if isinstance(e, ev.RunDone):
        return msg.RunFinished(e.run_dir, e.complete, e.failures, e.summary_csv)
    kind = type(e).__name__  # the retrain core's steps before an evaluation's benchmark
    if kind == "CheckpointRegistered":
        return msg.RetrainNote(f"registered drafter {e.drafter.name} in {e.drafter_file}")
    if kind == "PreflightDone":
        bad = [f for f in e.findings if f.severity == "error"]
        text = (
            "preflight passed: benchmarking"
            if e.ok
            else "preflight found errors: " + "; ".join(f"{f.variant or 'plan'}: {f.what}" for f in bad)
        )
        return msg.RetrainNote(text, ok=e.ok)
    return None
