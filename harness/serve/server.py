"""One engine server on a target: start detached, follow its log, wait until ready, stop by process group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from harness.analysis.rundir import REDACTED, append_jsonl, redact_argv, scrub, secret_values
from harness.common.aio import finish, reap
from harness.common.errors import HarnessError
from harness.engines import engine_of
from harness.serve.kept import KeptServer, VariantServer
from harness.serve.key_handoff import hand_over, remove_key_file
from harness.targets.base import free_port
from harness.targets.listeners import port_listeners

if TYPE_CHECKING:
    from harness.engines.base import Engine, EngineAdmin
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target

TAIL_LINES = 50
STOP_NOTE = "  [draftbench: expected on our SIGTERM, a normal stop, not a crash]"


def label_stop_lines(engine: Engine, lines: list[str], stopping: bool) -> tuple[list[str], int]:
    """The lines as shown (log pane, failure tails) with the engine's crash-looking shutdown lines marked as
    the expected stop, only once draftbench itself has sent the TERM; and how many were marked. The log
    file keeps the engine's own words."""
    if not stopping:
        return lines, 0
    marked = [ln + STOP_NOTE if engine.expected_on_stop(ln) else ln for ln in lines]
    return marked, sum(a is not b for a, b in zip(marked, lines, strict=True))

LinesCallback = Callable[[list[str]], Awaitable[None] | None]


def stopped_detail(server: VariantServer) -> str:
    """What a stopped server's state says: that its crash-looking shutdown lines were the expected stop."""
    if not server.stop_lines:
        return ""
    name = server.engine.display_name
    return (f"{name} logged its usual 'Subprocess ... crashed with exit code -15' on our SIGTERM: the "
            "expected shutdown, not a crash")


class ServerFailed(HarnessError):
    def __init__(self, variant: str, reason: str, last_lines: list[str]):
        self.variant = variant
        self.reason = reason
        self.last_lines = last_lines
        tail = "\n".join(last_lines[-TAIL_LINES:])
        super().__init__(f"server for variant '{variant}' {reason}"
                         + (f"; last log lines:\n{tail}" if tail else ""))


class Server:
    """Lifecycle of one variant's server. The process group id is recorded on the target and locally."""

    has_log = True  # its log is followed into the run directory (an ExistingServer has none)

    def __init__(self, target: Target, plan: Plan, variant: Variant, *, run_id: str, run_dir: Path,
                 engine_version: str | None, on_lines: LinesCallback | None = None,
                 api_key: str | None = None):
        self.target = target
        self.plan = plan
        self.variant = variant
        self.name = variant.name
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.engine = engine_of(plan, variant)
        self.engine_version = engine_version
        self.on_lines = on_lines
        # from the environment (inputs.endpoints): handed over by file (key_handoff), scrubbed
        self.api_key = api_key
        self.key_file: str | None = None  # the 0600 file the server reads its key from, deleted once it is up
        # the server wrote the key into its own log on the target (SGLang's ServerArgs)
        self.key_in_log = False
        self.port: int | None = None
        self.pgid: int | None = None
        self.argv: list[str] = []
        self.remote_log = ""
        self.base_url = ""  # http://host:port reachable from here (through a forward when remote)
        self.admin: EngineAdmin | None = None  # once started
        self.ready_seen = asyncio.Event()
        self.port_holder: tuple[int, int] | None = None  # (pid, group) of another process on its port
        self.stopping = False  # set when draftbench sends the TERM: the engine's shutdown lines are expected
        self.stop_lines = 0  # how many of them were seen (and marked) since
        self.last_lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.lines_seen = 0
        self._tail_task: asyncio.Task | None = None
        self._partial = b""
        self.secrets: list[str] = []
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.log_offset = 0  # where this server's lines begin in its remote log (a replaced one's before)

    # ---- start ---------------------------------------------------------------------------------
    def launch_argv(self, port: int) -> list[str]:
        """The command this variant's server runs on `port`, as recorded and matched for adoption: an API key
        shows as `--api-key <redacted>` (it is handed over by file, harness.serve.key_handoff, never in
        argv)."""
        argv = self.engine.launch_argv(self.plan, self.variant, port, self.engine_version)
        return argv + ["--api-key", REDACTED] if self.api_key else argv

    def _env(self) -> dict[str, str]:
        env = {**(self.plan.target.env or {}), **(self.variant.env or {})}
        return {str(k): str(v) for k, v in env.items()}

    async def start(self) -> None:
        plan = self.plan
        workdir = await self.target.makedirs_private(plan.target.workdir)
        rundir = f"{workdir}/runs/{self.run_id}"
        await self.target.makedirs_private(rundir)
        port = plan.server.port
        self.port = int(port) if isinstance(port, int) else await free_port(self.target)
        self.argv = self.launch_argv(self.port)
        self.remote_log = f"{rundir}/{self.name}.log"
        # a resumed run's restart appends to the log of the server it replaces: only this server's lines count
        self.log_offset = await self._log_size()
        pid_path = f"{rundir}/{self.name}.pgid"
        env = self._env()
        self.secrets = self._secrets(env)
        spawn_argv = self.engine.launch_argv(plan, self.variant, self.port, self.engine_version)
        if self.api_key:
            spawn_argv, self.key_file = await hand_over(self.target, self.engine, spawn_argv, self.api_key,
                                                        f"{rundir}/{self.name}")
        self.started_at = time.monotonic()
        try:
            self.pgid = await self.target.spawn(spawn_argv, env=env, cwd=workdir, log_path=self.remote_log,
                                                pid_path=pid_path)
        except BaseException:
            await remove_key_file(self.target, self.key_file)
            await self._stop_unrecorded(pid_path)
            raise
        self._record_start(pid_path)
        await self._attach(offset=self.log_offset)

    async def _stop_unrecorded(self, pid_path: str, wait_s: float = 5.0) -> None:
        """A spawn cut short (a cancellation while its script ran): the process group may exist with no pgid
        handed back yet. Its pid file names it (the spawn script writes it within moments): stop that group,
        so no server is left that nothing records."""
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(Exception):
            while True:
                text = (await self.target.read_file(pid_path, max_bytes=64)).decode().strip() \
                    if await self._exists(pid_path) else ""
                if text.isdigit() and int(text) > 0:
                    if await self.target.alive(int(text)):
                        await self.target.kill_group(int(text))
                    return
                if time.monotonic() > deadline:
                    return
                await asyncio.sleep(0.05)

    async def _exists(self, path: str) -> bool:
        got = await self.target.run(["test", "-s", path], timeout=10)
        return got.rc == 0

    async def adopt(self, kept: KeptServer) -> None:
        """Take over a server an earlier run left running with this variant's exact launch command
        (harness.serve.adopt): its process group becomes this run's (recorded as started here, with
        `adopted_from`, so that stopping, reaping on --resume and the kept-server lists all see it), and its
        log is followed from its current end, so that only this run's lines are parsed."""
        self.port, self.pgid = int(kept.port), int(kept.pgid)
        self.argv = self.launch_argv(self.port)
        self.remote_log = kept.remote_log
        self.secrets = self._secrets(self._env())
        self.started_at = time.monotonic()
        self._record_start(kept.pid_path, adopted_from=kept.started_by)
        self.log_offset = await self._log_size()
        await self._attach(offset=self.log_offset)

    async def _log_size(self) -> int:
        """Bytes in its remote log now (0 when there is none yet)."""
        size = await self.target.run(["wc", "-c", self.remote_log], timeout=30)
        words = size.stdout.split() if size.rc == 0 else []
        return int(words[0]) if words and words[0].isdigit() else 0

    def _secrets(self, env: dict[str, str]) -> list[str]:
        found = set(secret_values(env, self.argv)) | ({self.api_key} if self.api_key else set())
        return sorted(found - {REDACTED}, key=len, reverse=True)  # argv shows the key as <redacted>

    def _record_start(self, pid_path: str, **extra: str) -> None:
        self._record({"variant": self.name, "pgid": self.pgid, "port": self.port,
                      "argv": redact_argv(self.argv), "remote_log": self.remote_log, "pid_path": pid_path,
                      "target": self.target.name, "ssh_port": self.plan.target.ssh_port,
                      "harness_pid": os.getpid(), "harness_host": platform.node(), "state": "started",
                      **extra, "wall": round(time.time(), 3)})

    async def _attach(self, *, offset: int) -> None:
        """Follow its log from byte `offset` into the run directory, and reach its port (forwarded)."""
        local_log = self.run_dir / "logs" / f"{self.name}.log"
        local_log.parent.mkdir(parents=True, exist_ok=True)
        self._tail_task = asyncio.create_task(self._follow(local_log, offset), name=f"tail-{self.name}")
        host, lport = await self.target.forward(self.plan.server.host, self.port)
        self.base_url = f"http://{host}:{lport}"
        self.admin = self.engine.admin(self.base_url, self.api_key)

    def _record(self, entry: dict[str, Any]) -> None:
        """servers.jsonl in the run directory: what we started, so cleanup and --resume can find it."""
        append_jsonl(self.run_dir / "servers.jsonl", entry)

    async def _follow(self, local_log: Path, offset: int = 0) -> None:
        """Copy the log into the run directory by whole lines (secret values scrubbed: the run directory
        gets shared) and hand the lines on."""
        with open(local_log, "ab") as fh:
            try:
                await self._follow_into(fh, offset)
            finally:
                if self._partial:  # a last line without its newline yet
                    fh.write(scrub(self._partial, self.secrets))
                    self._partial = b""

    async def _follow_into(self, fh: BinaryIO, offset: int = 0) -> None:
        async for block in self.target.tail(self.remote_log, offset=offset):
            *complete, self._partial = (self._partial + block).split(b"\n")
            if not complete:
                continue
            raw = b"\n".join(complete)
            text = scrub(raw, self.secrets)
            if self.api_key and not self.key_in_log and text != raw and self.api_key.encode() in raw:
                self.key_in_log = True  # the runner warns: the target's own copy holds it
            fh.write(text + b"\n")
            fh.flush()
            lines = [c.decode("utf-8", "replace").rstrip("\r") for c in text.split(b"\n")]
            lines, marked = label_stop_lines(self.engine, lines, self.stopping)
            self.stop_lines += marked
            self.lines_seen += len(lines)
            for line in lines:
                self.last_lines.append(line)
                if self.engine.ready_line in line:
                    self.ready_seen.set()
            if self.on_lines is not None:
                res = self.on_lines(lines)
                if asyncio.iscoroutine(res):
                    await res

    # ---- readiness -------------------------------------------------------------------------------
    async def wait_ready(self, timeout: float) -> float:
        """Wait for /health_generate (or the ready log line). Fails fast if the process dies."""
        assert self.admin is not None and self.pgid is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_seen.is_set() or await self.admin.healthy(timeout=5.0):
                # the log line can precede the HTTP probe by a moment; insist on a real answer, and from
                # this server: a process outside its group on its port is someone else's (harness.targets.
                # listeners), whose every number would be taken for this variant's
                if await self.admin.healthy(timeout=30.0) and not await self._port_taken():
                    await remove_key_file(self.target, self.key_file)  # read at start-up: no longer needed
                    self.key_file = None
                    self.ready_at = time.monotonic()
                    return self.ready_at - (self.started_at or self.ready_at)
            if not await self.target.alive(self.pgid):
                await self._drain_log()
                raise ServerFailed(self.name, "exited before it became ready" + self._taken_note(),
                                   list(self.last_lines))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.ready_seen.wait(), timeout=0.5)
        await self._drain_log()
        raise ServerFailed(self.name, f"did not become healthy within {timeout:.0f} s" + self._taken_note(),
                           list(self.last_lines))

    async def _port_taken(self) -> bool:
        """Does /proc show every listener on this server's port outside its process group?"""
        assert self.port is not None and self.pgid is not None
        got = await port_listeners(self.target, self.port)
        self.port_holder = got.foreign_to(self.pgid) if got is not None else None
        return self.port_holder is not None

    def _taken_note(self) -> str:
        if self.port_holder is None:
            return ""
        pid, group = self.port_holder
        return (f"; port {self.port} answered, but from pid {pid} (process group {group}), not this server's "
                f"group {self.pgid}: another process took the port before this server bound it (a new start "
                "picks another port unless server.port pins it), or the launcher runs the server outside the "
                "process group draftbench starts, where draftbench could not stop it either")

    async def _drain_log(self) -> None:
        """Give the log follower a moment to deliver the last lines (they explain most failures)."""
        with contextlib.suppress(Exception):
            data = scrub((await self.target.read_file(self.remote_log))[self.log_offset:], self.secrets)
            lines = data.decode("utf-8", "replace").splitlines()
            self.last_lines.clear()
            self.last_lines.extend(lines[-TAIL_LINES:])

    async def alive(self) -> bool:
        return self.pgid is not None and await self.target.alive(self.pgid)

    # ---- stop --------------------------------------------------------------------------------------
    async def stop(self, *, keep: bool = False, term_timeout: float = 20.0) -> bool:
        """Stop by process group (TERM, then KILL). Returns True when nothing of the group is left."""
        gone = True
        try:
            if self.pgid is not None and not keep:
                self.stopping = True
                gone = await self.target.kill_group(self.pgid, term_timeout=term_timeout)
                self._record({"variant": self.name, "pgid": self.pgid,
                              "state": "stopped" if gone else "stop-failed"})
            elif keep and self.pgid is not None:
                self._record({"variant": self.name, "pgid": self.pgid, "state": "kept"})
        finally:  # also when the target is gone: the follower and the admin session never outlive the server
            # run to the end even when the caller is cancelled meanwhile, then pass its cancellation on
            if await finish(self._release()):
                raise asyncio.CancelledError
        return gone

    async def _release(self) -> None:
        await remove_key_file(self.target, self.key_file)
        self.key_file = None
        if self._tail_task is not None:
            # let the follower write the shutdown lines, then stop it (a follower that failed, e.g. on a
            # lost SSH link, has its error taken here rather than left unretrieved)
            await reap(self._tail_task, timeout=0.5)
            self._tail_task.cancel()
            await reap(self._tail_task)
        if self.admin is not None:
            await self.admin.close()
