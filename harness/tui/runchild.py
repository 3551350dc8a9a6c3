"""The benchmark's own process: `python -m harness.tui.runchild`, started by the TUI for every run.

The TUI process renders; this one measures. It runs the same `harness.bench.runner.run_plan` as the CLI with
its own interpreter (own GIL, own event loop), so nothing the UI does can delay a network read here. Protocol:
stdin carries one pickle of (call, args, kwargs, target_factory or None) where call names a core async
generator of events ("harness.bench.runner:run_plan", its several-node form
"harness.bench.multinode:run_multi", "harness.retrain.checkpoints:evaluate_checkpoint", which ends in
run_plan, or "harness.studies.tune:tune", a search made of run_plans); stdout carries length-prefixed pickles
of ("event", event) ... then ("end", status, detail) with status one of "done" | "cancelled" | "crashed".
SIGTERM or SIGHUP cancels the run (servers stopped unless kept), as in the CLI. No textual here.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pickle
import signal
import sys
import traceback
from collections.abc import AsyncIterator, Callable
from typing import IO, Any

from harness.common.errors import PreflightFailed

HEADER = 4  # bytes of big-endian frame length


def frame(obj: object) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(HEADER, "big") + data


def unframe(buf: bytearray) -> list[Any]:
    """Pop every complete frame off the front of buf."""
    out = []
    while len(buf) >= HEADER:
        n = int.from_bytes(buf[:HEADER], "big")
        if len(buf) < HEADER + n:
            break
        out.append(pickle.loads(bytes(buf[HEADER : HEADER + n])))
        del buf[: HEADER + n]
    return out


CALLS = {"harness.bench.runner:run_plan", "harness.bench.gate:checked_run_plan",
         "harness.bench.multinode:run_multi", "harness.retrain.checkpoints:evaluate_checkpoint",
         "harness.studies.tune:tune", "harness.retrain.loop:retrain_loop", "harness.retrain.watch:watch"}


def resolve_call(name: str) -> Callable[..., AsyncIterator[Any]]:
    if name not in CALLS:
        raise ValueError(f"not a run the TUI starts: {name}")
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


async def _run(payload: tuple, out: IO[bytes]) -> None:
    call, args, kwargs, target_factory = payload
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, task.cancel)
    kwargs = dict(kwargs)
    if target_factory is not None:
        kwargs["target"] = target_factory()
    try:
        async for event in resolve_call(call)(*args, **kwargs):
            try:
                out.write(frame(("event", event)))
                out.flush()
            except (BrokenPipeError, OSError):  # the TUI is gone: stop the run, which stops its servers
                task.cancel()
    finally:
        if "target" in kwargs:
            await kwargs["target"].close()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ctrl+c belongs to the TUI, which cancels us itself
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the event stream
    args = pickle.load(sys.stdin.buffer)
    try:
        asyncio.run(_run(args, out))
        end = ("end", "done", "")
    except (asyncio.CancelledError, KeyboardInterrupt):
        end = ("end", "cancelled", "")
    except PreflightFailed as exc:  # stopped before any server started: the check's own lines, no traceback
        end = ("end", "crashed", "; ".join(exc.lines))
    except Exception as exc:  # reported to the TUI with the traceback on stderr
        traceback.print_exc()
        end = ("end", "crashed", f"{type(exc).__name__}: {exc}")
    try:
        out.write(frame(end))
        out.flush()
    except (BrokenPipeError, OSError):
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
