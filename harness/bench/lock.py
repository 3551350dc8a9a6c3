"""One draftbench at a time per run directory: an exclusive flock on <run dir>/run.lock, held for the
whole run or resume. A second run or resume of the same directory is refused at once, naming the
directory and the holder's pid, before it touches anything (a resume would otherwise reap the first
one's live server as a leftover and append to the same records).

The kernel drops the lock when its holder exits, however it exits (SIGKILL included), so a stale lock
file never blocks a resume; the file's content (pid, host, since) is only what the refusal reports.
The descriptor is close-on-exec: a server the run spawns never inherits the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import time
from pathlib import Path

from harness.common.errors import InputError

LOCK_FILE = "run.lock"


class RunDirLock:
    """Held from `acquire()` to `release()`; refuses with InputError when another process holds it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        # never O_TRUNC: the holder's pid
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise InputError(str(self.run_dir), None, None,
                             f"in use by another draftbench ({holder}): wait for it to end, or stop it "
                             "(Ctrl-C) and resume then; nothing was changed") from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps({"pid": os.getpid(), "host": platform.node(),
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n").encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    """'pid 1234 on host, since ...' from the lock file (empty while the holder is still writing it)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        since = f", since {data['since']}" if data.get("since") else ""
        return f"pid {int(data['pid'])} on {data.get('host') or '?'}{since}"
    return "pid unknown"
