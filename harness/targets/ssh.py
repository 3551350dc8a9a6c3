"""`SSHTarget`: the Target contract over one asyncssh connection that comes back after a dropped link.

Host keys are always checked (known_hosts, or UserKnownHostsFile from the OpenSSH config); auth is by key
or agent only. Every remote command is a `shlex`-quoted line for the login shell (assumed POSIX-like).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shlex
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncssh
from asyncssh.known_hosts import KnownHostsArg

from harness.common.errors import HarnessError
from harness.targets.base import _MISSING_RC, CommandResult, ShellTarget, command_line, quote_path

T = TypeVar("T")
_RECONNECT_DELAYS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # backoff between attempts after a dropped link
_BUF = 1 << 16

# Remote follower: `tail -F` from a byte offset, killed by a watcher once the SSH channel's stdin closes
# (our close, or a dropped link), so no `tail` outlives the channel on the node.
_TAIL_SH = 'exec 3<&0; { cat <&3; kill $$; } </dev/null >/dev/null 2>&1 & exec tail -c "+$1" -F -- "$2" 3<&-'


class _NoRetry(HarnessError):
    """A connect failure that retrying cannot fix (untrusted host key, rejected credentials)."""


class _Client(asyncssh.SSHClient):
    """Remembers the host key offered when known_hosts did not trust it, and whether the link went down."""

    def __init__(self) -> None:
        self.untrusted: tuple[str, int, asyncssh.SSHKey] | None = None
        self.addr = ""
        # what the key was checked against (to tell a changed key from a new one)
        self.known_hosts: KnownHostsArg = None
        self.lost = False

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.untrusted = (host, port, key)
        self.addr = addr
        return False

    def key_changed(self) -> bool:
        """known_hosts holds a key for this host, only not the one offered."""
        if self.untrusted is None or self.known_hosts is None:
            return False
        host, port, _key = self.untrusted
        try:
            trusted = asyncssh.match_known_hosts(self.known_hosts, host, self.addr, port)
        except (OSError, ValueError, asyncssh.Error):
            return False
        return bool(trusted[0] or trusted[1])

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class SSHTarget(ShellTarget):
    def __init__(
        self,
        destination: str,
        *,
        ssh_port: int | None = None,
        known_hosts: str | None = None,
        client_keys: list[str] | None = None,
        config: list[str] | None = None,
        connect_timeout: float = 20.0,
        keepalive_interval: float = 15.0,
    ) -> None:
        self.name = destination
        self.is_local = False
        user, _, host = destination.rpartition("@")
        self._host = host
        opts: dict[str, Any] = {
            "preferred_auth": "publickey",  # keys and agent; never a password prompt
            "connect_timeout": connect_timeout,
            "keepalive_interval": keepalive_interval,  # a silently dead link is noticed within ~1 min
            "keepalive_count_max": 4,
        }
        for key, value in (
            ("username", user or None),
            ("port", ssh_port),
            ("known_hosts", known_hosts),
            ("client_keys", client_keys),
            ("config", config),
        ):
            if value is not None:
                opts[key] = value
        self._opts = opts
        self._conn: asyncssh.SSHClientConnection | None = None
        self._client: _Client | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._servers: list[asyncio.Server] = []
        self._pipes: set[asyncio.Task] = set()
        self.reconnects = 0  # how many times a lost connection was replaced

    # --- connection ---------------------------------------------------------------------------------

    async def connect(self) -> None:
        await self._connection()

    def _usable(self, conn: asyncssh.SSHClientConnection | None) -> bool:
        return conn is not None and conn is self._conn and not (self._client and self._client.lost)

    async def _open(self) -> tuple[asyncssh.SSHClientConnection, _Client]:
        client = _Client()
        where = self._host
        try:
            # config=() loads ~/.ssh/config as connect() does: without it HostName and Port read as the alias
            # and 22, and an error named port 22 for a host reached on another
            opts = {**self._opts, "config": self._opts.get("config", ())}
            options = await asyncssh.SSHClientConnectionOptions.construct(host=self._host, **opts)
            if options.known_hosts is None:  # `UserKnownHostsFile none` would turn checking off: refuse that
                default = os.path.expanduser("~/.ssh/known_hosts")
                options = asyncssh.SSHClientConnectionOptions(
                    options, known_hosts=default if os.path.isfile(default) else b""
                )
            where = f"{options.host}:{options.port}"  # after ~/.ssh/config (HostName, Port)
            client.known_hosts = options.known_hosts
            conn = await asyncssh.connect(
                self._host,
                port=self._opts.get("port", ()),
                config=self._opts.get("config", ()),
                options=options,
                client_factory=lambda: client,
            )
        except Exception as exc:  # noqa: BLE001 - every failure becomes one user-facing line
            raise self._connect_error(exc, client, where) from None
        return conn, client

    def _connect_error(self, exc: Exception, client: _Client, where: str) -> HarnessError:
        dest = f"ssh {self.name}"
        if isinstance(exc, asyncssh.HostKeyNotVerifiable) and client.untrusted:
            host, port, key = client.untrusted
            offered = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
            if client.key_changed():  # never advise trusting it blindly: this is what an attack looks like
                entry = f"[{host}]:{port}" if port != 22 else host
                return _NoRetry(
                    f"{dest}: the host key of {host}:{port} CHANGED: known_hosts has another key for it and "
                    f"the host offered {offered}. Someone may be intercepting the connection, or the host "
                    f"was reinstalled: confirm that fingerprint with its administrator before removing the "
                    f"old entry (`ssh-keygen -R '{entry}'`) and connecting once with `ssh`."
                )
            scan = f"ssh-keyscan -p {port} {host}" if port != 22 else f"ssh-keyscan {host}"
            return _NoRetry(
                f"{dest}: host key of {host}:{port} is not trusted ({offered}): it is not in known_hosts. If "
                f"that fingerprint is the host's, accept it with `{scan} >> ~/.ssh/known_hosts` or by "
                f"connecting once with `ssh`."
            )
        if isinstance(exc, asyncssh.PermissionDenied):
            return _NoRetry(f"{dest}: authentication failed (keys and ssh-agent only, no passwords): {exc}")
        if isinstance(exc, asyncssh.DisconnectError):
            return HarnessError(f"{dest}: {exc.reason}")
        if isinstance(exc, socket.gaierror):
            return HarnessError(f"{dest}: cannot resolve host {self._host!r}: {exc.strerror}")
        if isinstance(exc, ConnectionRefusedError):
            return HarnessError(f"{dest}: connection refused by {where} (is sshd running there?)")
        if isinstance(exc, TimeoutError):
            return HarnessError(
                f"{dest}: connecting to {where} timed out after {self._opts['connect_timeout']:g}s"
            )
        if isinstance(exc, OSError):
            return HarnessError(f"{dest}: {where}: {exc.strerror or exc}")
        return HarnessError(f"{dest}: {type(exc).__name__}: {exc}")

    async def _connection(
        self, *, stale: asyncssh.SSHClientConnection | None = None
    ) -> asyncssh.SSHClientConnection:
        """The live connection, opening it (or replacing a lost one, with backoff) when needed."""
        if self._usable(self._conn) and self._conn is not stale:
            return self._conn  # type: ignore[return-value]
        async with self._lock:
            if self._closed:
                raise HarnessError(f"ssh {self.name}: target is closed")
            if self._usable(self._conn) and self._conn is not stale:
                return self._conn  # type: ignore[return-value]
            replacing = self._conn is not None
            if self._conn is not None:
                self._conn.abort()
                self._conn = None
            delays = _RECONNECT_DELAYS if replacing else (0.0,)
            for i, delay in enumerate(delays):
                await asyncio.sleep(delay)
                try:
                    self._conn, self._client = await self._open()
                    break
                except HarnessError as exc:
                    if isinstance(exc, _NoRetry) or i == len(delays) - 1:
                        raise
            self.reconnects += int(replacing)
            return self._conn  # type: ignore[return-value]

    def _was_lost(self, conn: asyncssh.SSHClientConnection, exc: BaseException) -> bool:
        return isinstance(exc, asyncssh.ConnectionLost) or conn.is_closed() or not self._usable(conn)

    async def _call(self, op: Callable[[asyncssh.SSHClientConnection], Awaitable[T]]) -> T:
        """op on the connection; once more on a fresh connection if the link dropped under it."""
        conn = await self._connection()
        try:
            return await op(conn)
        except (asyncssh.Error, OSError) as exc:
            if not self._was_lost(conn, exc):
                raise
        return await op(await self._connection(stale=conn))

    # --- commands -----------------------------------------------------------------------------------

    async def _exec(self, cmd: str, *, timeout: float | None, binary: bool) -> tuple[int, Any, str]:
        """Run one command line; `timeout` only bounds the wait here (the remote side is bounded by
        `command_line(timeout=...)`, plus a margin for a slow link)."""
        wait_s = None if timeout is None else timeout + 10.0

        async def op(conn: asyncssh.SSHClientConnection) -> tuple[int, Any, str]:
            proc = await conn.create_process(cmd, encoding=None, stdin=asyncssh.DEVNULL)
            try:
                res = await proc.wait(timeout=wait_s)
            finally:
                proc.close()  # frees the channel (sshd's MaxSessions) even when we stop waiting
            if res.returncode is None:  # channel closed without an exit status: the link went down
                raise asyncssh.ConnectionLost("connection lost while the command ran")
            out = bytes(res.stdout or b"")
            err = bytes(res.stderr or b"").decode("utf-8", "replace")
            return res.returncode, out if binary else out.decode("utf-8", "replace"), err

        started = time.monotonic()
        try:
            rc, out, err = await self._call(op)
        except asyncssh.TimeoutError:
            rc, out, err = -1, b"", ""
        except (asyncssh.Error, OSError) as exc:
            raise HarnessError(f"ssh {self.name}: {getattr(exc, 'reason', None) or exc}") from None
        if timeout is not None and rc in (-1, 124, 137) and time.monotonic() - started >= timeout:
            raise HarnessError(f"ssh {self.name}: command timed out after {timeout:g}s: {cmd[:200]}")
        return rc, out, err

    async def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        cmd = command_line(argv, env=env, cwd=cwd, timeout=timeout)
        rc, out, err = await self._exec(cmd, timeout=timeout, binary=False)
        return CommandResult(rc, out, err)

    async def makedirs_private(self, path: str) -> str:
        q = quote_path(path)
        res = await self.run(["sh", "-c", f"mkdir -p {q} && chmod 700 {q} && cd {q} && pwd"], timeout=60)
        if res.rc != 0:
            raise HarnessError(f"ssh {self.name}: cannot create {path}: {res.stderr.strip()[:300]}")
        return res.stdout.strip()

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The file's first max_bytes bytes (all when None); FileNotFoundError when it does not exist."""
        q = quote_path(path)
        reader = f"head -c {int(max_bytes)} {q}" if max_bytes is not None else f"cat {q}"
        script = f"[ -e {q} ] || exit {_MISSING_RC}; exec {reader}"
        cmd = command_line(["sh", "-c", script], timeout=120)
        rc, out, err = await self._exec(cmd, timeout=120, binary=True)
        if rc == _MISSING_RC:
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such file", path)
        if rc != 0:
            raise HarnessError(f"ssh {self.name}: cannot read {path}: {err.strip()[:300]}")
        return out

    async def write_private(self, path: str, data: bytes) -> None:
        """Write a file only its owner can read: the bytes go over the channel's stdin, never on a command
        line."""
        q = quote_path(path)
        cmd = command_line(["sh", "-c", f"umask 077 && rm -f {q} && cat > {q}"], timeout=60)

        async def op(conn: asyncssh.SSHClientConnection) -> tuple[int | None, str]:
            res = await conn.run(cmd, input=data, encoding=None, timeout=70)
            return res.returncode, bytes(res.stderr or b"").decode("utf-8", "replace")

        try:
            rc, err = await self._call(op)
        except (asyncssh.Error, OSError) as exc:
            why = getattr(exc, "reason", None) or exc
            raise HarnessError(f"ssh {self.name}: cannot write {path}: {why}") from None
        if rc != 0:
            raise HarnessError(f"ssh {self.name}: cannot write {path}: {err.strip()[:300]}")

    # --- tail ---------------------------------------------------------------------------------------

    async def tail(self, path: str, *, offset: int = 0) -> AsyncIterator[bytes]:
        """Bytes appended to path from `offset` on; after a dropped link it reconnects and resumes at the
        last byte received, so nothing is lost or repeated. Raises HarnessError when it cannot go on."""
        pos, drops = offset, 0
        conn: asyncssh.SSHClientConnection | None = None
        while True:
            # raises HarnessError once its own reconnect attempts (with backoff) are used up
            conn = await self._connection(stale=conn)
            cmd = shlex.join(["sh", "-c", _TAIL_SH, "sh", str(pos + 1)]) + " " + quote_path(path)
            proc = None
            try:
                proc = await conn.create_process(cmd, encoding=None)
                while data := await proc.stdout.read(_BUF):
                    pos += len(data)
                    drops = 0
                    yield data
                await proc.wait_closed()
                if proc.returncode is not None and self._usable(conn):
                    err = (await proc.stderr.read()).decode("utf-8", "replace").strip()
                    raise HarnessError(
                        f"ssh {self.name}: tail of {path} stopped (rc {proc.returncode}): {err[:300]}"
                    )
            except (asyncssh.Error, OSError) as exc:
                if not self._was_lost(conn, exc):
                    raise HarnessError(f"ssh {self.name}: following {path}: {exc}") from None
            finally:
                if proc is not None:
                    proc.close()
            drops += 1  # the link went down: resume from pos on a new connection
            if drops > len(_RECONNECT_DELAYS):
                raise HarnessError(f"ssh {self.name}: the connection keeps dropping while following {path}")

    # --- port forwarding ----------------------------------------------------------------------------

    async def forward(self, host: str, port: int) -> tuple[str, int]:
        """A local 127.0.0.1 port whose connections reach host:port as seen from the target.

        The listener is ours, not asyncssh's: it outlives reconnects, so the port never changes; each new
        local connection opens a channel on whatever SSH connection is current (connections that were open
        when the link dropped are cut)."""
        await self._connection()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._pipes.add(task)
            try:
                await self._pipe(reader, writer, host, port)
            finally:
                self._pipes.discard(task)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self._servers.append(server)
        return "127.0.0.1", server.sockets[0].getsockname()[1]

    async def _pipe(
        self, local_r: asyncio.StreamReader, local_w: asyncio.StreamWriter, host: str, port: int
    ) -> None:
        try:
            remote_r, remote_w = await self._call(lambda c: c.open_connection(host, port))
        except (asyncssh.Error, OSError, HarnessError):
            local_w.close()  # the target refused (server not up yet) or the link is gone: client sees EOF
            return
        writers: list[asyncio.StreamWriter | asyncssh.SSHWriter[bytes]] = [local_w, remote_w]

        async def copy(src: asyncio.StreamReader | asyncssh.SSHReader[bytes],
                       dst: asyncio.StreamWriter | asyncssh.SSHWriter[bytes]) -> None:
            try:
                while data := await src.read(_BUF):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except Exception:  # noqa: BLE001 - either side failing ends both directions
                for w in writers:
                    w.close()

        try:
            await asyncio.gather(copy(local_r, remote_w), copy(remote_r, local_w))
        finally:
            for w in writers:
                w.close()

    async def close(self) -> None:
        self._closed = True
        for server in self._servers:
            server.close()
        self._servers.clear()
        for task in list(self._pipes):
            task.cancel()
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await self._conn.wait_closed()
            self._conn = None
