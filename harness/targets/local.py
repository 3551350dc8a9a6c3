"""This machine as a target: asyncio subprocesses and the same spawn wrapper as SSH. A process group's
liveness is read from /proc where there is one, by the rule of the `ps` check SSH targets run (a member that
is not a zombie): `kill_group` asks ten times a second while a server stops, and a `ps` process per question
cost ~10 ms of CPU, ~1.5 s of a small two-server run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import AsyncIterator

from harness.common.errors import HarnessError
from harness.targets.base import _POLL_S, CommandResult, ShellTarget, _check_pgid, check_env

_PROC = "/proc"


class LocalTarget(ShellTarget):
    """Runs everything on this machine with asyncio subprocesses."""

    def __init__(self) -> None:
        self.name = "local"
        self.is_local = True

    async def connect(self) -> None:
        return None

    async def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        if not argv:
            raise HarnessError("empty command")
        full_env = {**os.environ, **check_env(env)}
        if cwd is not None:
            cwd = os.path.expanduser(cwd)
            if not os.path.isdir(cwd):
                return CommandResult(1, "", f"cd: {cwd}: No such file or directory\n")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                start_new_session=True,  # its own group, so a timeout kills what it started too
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found\n")
        except PermissionError:
            return CommandResult(126, "", f"{argv[0]}: permission denied\n")
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            raise HarnessError(
                f"local: command timed out after {timeout:g}s: {shlex.join(argv)[:200]}"
            ) from None
        finally:
            if proc.returncode is None:  # timed out or cancelled
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        rc = proc.returncode if proc.returncode is not None else -1
        return CommandResult(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    async def _signal_group(self, pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)

    async def alive(self, pgid: int) -> bool:
        """A member of the group that is not a zombie, as ShellTarget's `ps` check says it; without /proc,
        that check itself."""
        _check_pgid(pgid)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False  # no member at all
        except PermissionError:
            pass  # another user's group: /proc still tells
        if not os.path.isdir(_PROC):
            return await super().alive(pgid)
        return group_alive_in_proc(pgid)

    async def tail(self, path: str, *, offset: int = 0) -> AsyncIterator[bytes]:
        """Bytes appended to path from `offset` on, forever (waits for the file to appear)."""
        path, pos = os.path.expanduser(path), offset
        while True:
            data = b""
            try:
                with open(path, "rb") as f:
                    if os.fstat(f.fileno()).st_size < pos:
                        pos = 0  # truncated: start over, like tail -F
                    f.seek(pos)
                    data = f.read(1 << 16)
            except FileNotFoundError:
                pass
            if data:
                pos += len(data)
                yield data
            else:
                await asyncio.sleep(_POLL_S)

    async def forward(self, host: str, port: int) -> tuple[str, int]:
        return host, port

    async def makedirs_private(self, path: str) -> str:
        path = os.path.abspath(os.path.expanduser(path))
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)
        except OSError as exc:
            raise HarnessError(f"local: cannot create {path}: {exc.strerror}") from None
        return path

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The file's first max_bytes bytes (all when None); FileNotFoundError when it does not exist."""
        try:
            with open(os.path.expanduser(path), "rb") as f:
                return f.read(-1 if max_bytes is None else max_bytes)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise HarnessError(f"local: cannot read {path}: {exc.strerror}") from None

    async def write_private(self, path: str, data: bytes) -> None:
        """Write a file only its owner can read (a secret handed to a server): created 0600, replaced
        whole."""
        path = os.path.expanduser(path)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise HarnessError(f"local: cannot write {path}: {exc.strerror}") from None

    async def close(self) -> None:
        return None


def group_alive_in_proc(pgid: int) -> bool:
    """Whether /proc lists a process of group `pgid` that is not a zombie (field 5 of /proc/PID/stat is the
    group, field 3 the state; the command name in field 2 may hold spaces and parentheses)."""
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        try:
            with open(f"{_PROC}/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False
