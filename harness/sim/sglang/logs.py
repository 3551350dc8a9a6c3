"""SGLang 0.5.15 log lines: the logger prefix, Prefill/Decode batch lines (family I), uvicorn access lines.

Formats follow ``scheduler_components/metrics_reporter.py`` and ``utils/common.py::configure_logger`` of
0.5.15.post1 and the H200 captures: ``[%Y-%m-%d %H:%M:%S]`` (``.mmm`` with ``SGLANG_LOG_MS=1``), a
`` DPn``/`` TPn`` rank suffix only on scheduler lines and only when that size is > 1, no trailing comma.
Python-logging lines go to stderr, uvicorn access lines to stdout (as uvicorn's handlers do); every line
is flushed so a tailing reader sees it at once.
"""

from __future__ import annotations

import os
import sys
import time
from http import HTTPStatus
from typing import TextIO


def rank_prefix(tp_size: int, dp_size: int, tp_rank: int = 0, dp_rank: int = 0) -> str:
    prefix = f" DP{dp_rank}" if dp_size > 1 else ""
    return prefix + (f" TP{tp_rank}" if tp_size > 1 else "")


def timestamp(now: float | None = None, with_ms: bool = False) -> str:
    now = time.time() if now is None else now
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return text + (f".{int(now * 1000) % 1000:03d}" if with_ms else "")


def decode_line(
    *,
    running: int,
    num_used: int,
    usage: float,
    spec: tuple[float, float] | None,
    graph: bool,
    gen_throughput: float,
    queue: int,
) -> str:
    msg = f"Decode batch, #running-req: {running}, #token: {num_used}, token usage: {usage:.2f}, "
    if spec is not None:
        msg += f"accept len: {spec[0]:.2f}, accept rate: {spec[1]:.2f}, "
    return msg + f"cuda graph: {graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}"


def prefill_line(
    *,
    new_seq: int,
    new_token: int,
    cached_token: int,
    usage: float,
    running: int,
    queue: int,
    pending_token: int,
    graph: bool,
    input_throughput: float,
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
        f"#pending-token: {pending_token}, cuda graph: {graph}, "
        f"input throughput (token/s): {input_throughput:.2f}"
    )


def access_line(host: str, port: int, method: str, path: str, status: int) -> str:
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    return f'INFO:     {host}:{port} - "{method} {path} HTTP/1.1" {status} {phrase}'


class SimLog:
    """Writes timestamped lines the way SGLang's configured loggers do."""

    def __init__(
        self,
        *,
        sched_prefix: str = "",
        err: TextIO | None = None,
        out: TextIO | None = None,
        level: str = "info",
    ):
        self.sched_prefix = sched_prefix
        self.err = err or sys.stderr
        self.out = out or sys.stdout
        self.with_ms = os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true")
        self.quiet = level.lower() in ("warning", "error", "critical")

    def _write(self, stream: TextIO, text: str) -> None:
        try:
            stream.write(text + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError):  # reader went away: a server keeps serving
            pass

    def info(self, msg: str, *, scheduler: bool = False) -> None:
        if not self.quiet:
            self.line(msg, scheduler=scheduler)

    def line(self, msg: str, *, scheduler: bool = False) -> None:
        prefix = self.sched_prefix if scheduler else ""
        self._write(self.err, f"[{timestamp(with_ms=self.with_ms)}{prefix}] {msg}")

    warning = line
    error = line

    def access(self, host: str, port: int, method: str, path: str, status: int) -> None:
        if not self.quiet:
            self._write(
                self.out,
                f"[{timestamp(with_ms=self.with_ms)}] {access_line(host, port, method, path, status)}",
            )

    def raw(self, text: str) -> None:
        """Unformatted output (warnings module, tracebacks, tqdm bars)."""
        self._write(self.err, text.rstrip("\n"))
