"""The target contract and the shell building that local and SSH targets share.

Everything that reaches a shell is built here from argv lists with `shlex.quote`, so local and remote
targets share one spawn wrapper and one process-group check. The target needs only POSIX sh and the usual
Linux tools (`setsid`, `ps`, `kill`, `tail`, `timeout`); nothing of draftbench is installed there.
"""

from __future__ import annotations

import asyncio
import random
import re
import shlex
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from harness.common.errors import HarnessError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MISSING_RC = 66  # read_file's "no such file" exit status (EX_NOINPUT)
_POLL_S = 0.1


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str


@runtime_checkable
class Target(Protocol):
    name: str  # "local" or the ssh destination as the user wrote it
    is_local: bool

    async def connect(self) -> None: ...

    async def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult: ...

    async def spawn(
        self, argv: list[str], *, env: dict[str, str], cwd: str, log_path: str, pid_path: str
    ) -> int: ...

    async def alive(self, pgid: int) -> bool: ...

    async def kill_group(self, pgid: int, *, term_timeout: float = 15.0) -> bool: ...

    def tail(self, path: str, *, offset: int = 0) -> AsyncIterator[bytes]: ...

    async def forward(self, host: str, port: int) -> tuple[str, int]: ...

    async def makedirs_private(self, path: str) -> str: ...

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes: ...

    # mode 0600, the data never on a command line
    async def write_private(self, path: str, data: bytes) -> None: ...

    async def close(self) -> None: ...


# --- shell building: every value goes through quote_path / shlex.quote ---------------------------------


def quote_path(path: str) -> str:
    """Quote a path for sh, keeping a leading `~` / `~/` unquoted so the target's shell expands it."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:]) if path[2:] else "~/"
    return shlex.quote(path)


def check_env(env: dict[str, str] | None) -> dict[str, str]:
    env = dict(env or {})
    for name in env:
        if not _ENV_NAME.match(name):
            raise HarnessError(f"invalid environment variable name {name!r}")
    return env


def command_line(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> str:
    """One POSIX shell command line for argv: `shlex.join(argv)`, with `cd`/`export` prefixes when needed.

    With a timeout, argv runs under coreutils `timeout` (TERM, then KILL 2 s later, to its whole process
    group): the SSH client cannot kill a remote command itself (OpenSSH ignores signal requests for root)."""
    if not argv:
        raise HarnessError("empty command")
    env = check_env(env)
    if timeout is not None:
        argv = ["timeout", "-k", "2", f"{timeout:g}", *argv]
    if not env and cwd is None:
        return shlex.join(argv)
    parts = [f"cd {quote_path(cwd)}"] if cwd is not None else []
    if env:
        parts.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    # `exec` keeps an argv[0] that contains "=" from being read as an assignment
    return " && ".join([*parts, "exec " + shlex.join(argv)])


# The detached process: its own session (pgid == its pid), pid file written atomically, then exec argv.
_SPAWN_INNER = 'echo $$ > "$1.tmp" && mv -f "$1.tmp" "$1" && shift && exec "$@"'


def spawn_script(argv: list[str], *, env: dict[str, str], cwd: str, log_path: str, pid_path: str) -> str:
    """sh script that starts argv detached (setsid, stdin /dev/null, output appended to log_path),
    waits for its pid file and prints the pgid. Relative log/pid paths resolve against cwd."""
    if not argv:
        raise HarnessError("empty command")
    env = check_env(env)
    pid, log = quote_path(pid_path), quote_path(log_path)
    return "\n".join(
        [
            f"cd {quote_path(cwd)} || exit 1",
            *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
            f"rm -f {pid} {pid}.tmp",
            f": >>{log} || exit 1",
            f"setsid sh -c {shlex.quote(_SPAWN_INNER)} sh {pid} {shlex.join(argv)} </dev/null >>{log} 2>&1 &",
            "i=0",
            f"while [ ! -s {pid} ]; do",
            "  i=$((i+1))",
            '  if [ "$i" -gt 400 ]; then'
            ' echo "draftbench: the process wrote no pid file in 20s" >&2; exit 1; fi',
            "  sleep 0.05 2>/dev/null || sleep 1",
            "done",
            f"cat {pid}",
        ]
    )


# `ps` lists zombies too, and `kill -0` succeeds on them: a group of zombies (left by a PID 1 that does not
# reap, as in some containers) counts as gone.
PS_GROUPS = ["ps", "-A", "-o", "pgid=", "-o", "stat="]


def group_alive_in(ps_output: str, pgid: int) -> bool:
    for line in ps_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == str(pgid) and not fields[1].startswith("Z"):
            return True
    return False


def _check_pgid(pgid: int) -> None:
    # kill(-1) / kill(0) would signal every process we may signal, or our own group
    if not isinstance(pgid, int) or pgid <= 1:
        raise HarnessError(f"refusing to signal process group {pgid!r}")


# `free_port`: a port in [PORT_LO, PORT_HI), below the kernel's ephemeral range, that binds on the target.
# SGLang derives more ports from --port (e.g. its gRPC port is port + 10000 and must stay < 65536: an
# ephemeral port such as 60273 made the real 0.5.15 refuse to start), so never hand it port 0's pick.
PORT_LO, PORT_HI = 20000, 32000
_FREE_PORT_PY = (
    "import random, socket\n"
    f"for port in random.sample(range({PORT_LO}, {PORT_HI}), 200):\n"
    "    s = socket.socket()\n"
    "    try:\n"
    "        s.bind(('', port))\n"
    "    except OSError:\n"
    "        continue\n"
    "    finally:\n"
    "        s.close()\n"
    "    print(port)\n"
    "    break\n"
)
FREE_PORT_SH = (
    "if command -v python3 >/dev/null 2>&1; then "
    f"python3 -c {shlex.quote(_FREE_PORT_PY)}; "
    "else echo PROCNET; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; fi"
)


def ports_in_use(proc_net_tcp: str) -> set[int]:
    """Local ports of every socket listed in /proc/net/tcp or tcp6 text."""
    used = set()
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 2 and ":" in fields[1] and fields[0].endswith(":"):
            used.add(int(fields[1].rsplit(":", 1)[1], 16))
    return used


def parse_free_port(
    output: str, *, lo: int = PORT_LO, hi: int = PORT_HI, rng: random.Random | None = None
) -> int:
    head, _, rest = output.strip().partition("\n")
    if head.isdigit():
        return int(head)
    if head != "PROCNET":
        raise HarnessError(f"cannot find a free port on the target: {output.strip()[:200]!r}")
    free = sorted(set(range(lo, hi)) - ports_in_use(rest))
    if not free:
        raise HarnessError(f"no free port in {lo}-{hi} on the target")
    return (rng or random.Random()).choice(free)


async def free_port(target: Target) -> int:
    """A TCP port nobody listens on, on the target (free when checked; bind it soon)."""
    if target.is_local:
        for port in random.sample(range(PORT_LO, PORT_HI), 200):
            with socket.socket() as s:
                try:
                    s.bind(("", port))
                except OSError:
                    continue
                return port
        raise HarnessError(f"no free port in {PORT_LO}-{PORT_HI} on this machine")
    res = await target.run(["sh", "-c", FREE_PORT_SH], timeout=30)
    if res.rc != 0:
        raise HarnessError(f"{target.name}: cannot find a free port: {res.stderr.strip()[:200]}")
    return parse_free_port(res.stdout)


class ShellTarget:
    """spawn / alive / kill_group, built on `run` and the scripts above; shared by both targets."""

    name: str

    async def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        raise NotImplementedError

    async def _signal_group(self, pgid: int, sig: signal.Signals) -> None:
        await self.run(["kill", "-s", sig.name.removeprefix("SIG"), "--", f"-{pgid}"], timeout=30)

    async def spawn(
        self, argv: list[str], *, env: dict[str, str], cwd: str, log_path: str, pid_path: str
    ) -> int:
        script = spawn_script(argv, env=env, cwd=cwd, log_path=log_path, pid_path=pid_path)
        res = await self.run(["sh", "-c", script], timeout=60)
        out = res.stdout.strip()
        if res.rc != 0 or not out.isdigit():
            raise HarnessError(
                f"{self.name}: cannot start {shlex.join(argv)[:200]}: {res.stderr.strip()[:500]}"
            )
        return int(out)

    async def alive(self, pgid: int) -> bool:
        _check_pgid(pgid)
        res = await self.run(PS_GROUPS, timeout=30)
        if res.rc != 0:
            raise HarnessError(f"{self.name}: ps failed: {res.stderr.strip()[:200]}")
        return group_alive_in(res.stdout, pgid)

    async def kill_group(self, pgid: int, *, term_timeout: float = 15.0) -> bool:
        """SIGTERM the group, wait up to term_timeout for it to go, then SIGKILL; True when none is left."""
        _check_pgid(pgid)
        for sig, wait_s in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, 10.0)):
            if not await self.alive(pgid):
                return True
            await self._signal_group(pgid, sig)
            deadline = time.monotonic() + wait_s
            while await self.alive(pgid):
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(_POLL_S)
            else:
                return True
        return not await self.alive(pgid)
