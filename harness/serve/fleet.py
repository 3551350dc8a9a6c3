"""The long-lived servers of a plan (the TUI's Servers section, or any front end that keeps servers up).

Start, stop and restart one variant or all, each built on `harness.serve.server.Server`; every change is
reported through one callback as `harness.common.events` events (ServerState, ServerLog, LogWindow, Alarm), so
a front end renders the same events whether they come from here or from a run.
Logs go to `<results>/servers/<session>/logs/<variant>.log` in full; the callback gets them as batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.alarms import AlarmTracker
from harness.analysis.live_speed import LiveSpeed
from harness.analysis.rundir import new_run_dir
from harness.checks import run_checks
from harness.common import events as ev
from harness.common.aio import reap
from harness.common.errors import HarnessError
from harness.common.findings import Finding
from harness.engines import engine_of
from harness.serve.kept import KeptServer, kept_servers, record_stopped, still_ours, workdir_servers
from harness.serve.server import Server, ServerFailed
from harness.targets import open_target

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target

EventCallback = Callable[[Any], None]
GPU_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
PS_QUERY = ["ps", "-eo", "pid=,pgid="]


@dataclass(frozen=True)
class MemberStatus:
    """A snapshot of one variant's server, as the Servers table shows it."""

    variant: str
    state: str  # "stopped" | "starting" | "ready" | "failed" | "stopping"
    port: int | None
    pgid: int | None
    started_at: float | None  # time.monotonic() when the start began (None when stopped)
    ready_at: float | None
    detail: str


@dataclass
class _Member:
    variant: Variant
    state: str = "stopped"
    server: Server | None = None
    started_at: float | None = None
    ready_at: float | None = None
    detail: str = ""
    port: int | None = None
    pgid: int | None = None
    starts: int = 0
    starting: asyncio.Task | None = None
    adopted: KeptServer | None = None  # started by an earlier draftbench, stopped by pgid
    url: str | None = None  # an adopted server's base URL


def parse_gpu_memory(smi_csv: str, ps_out: str, pgids: dict[str, int]) -> dict[str, int]:
    """MiB of GPU memory per variant: nvidia-smi's per-process usage summed over each process group."""
    group_of: dict[int, int] = {}
    for line in ps_out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            group_of[int(parts[0])] = int(parts[1])
    used: dict[int, int] = {}
    for line in smi_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            pgid = group_of.get(int(parts[0]))
            if pgid is not None:
                used[pgid] = used.get(pgid, 0) + int(parts[1])
    return {name: used[g] for name, g in pgids.items() if g in used}


def finding_to_alarm(finding: Finding | ev.Alarm) -> ev.Alarm:
    """A preflight finding (harness.checks) as the Alarm event a variant row shows."""
    if isinstance(finding, ev.Alarm):
        return finding
    what = finding.what or str(finding)
    fix = finding.fix
    return ev.Alarm(
        finding.variant or "",
        finding.severity,
        finding.code or "preflight",
        f"{what}" + (f" (fix: {fix})" if fix else ""),
    )


class Fleet:
    """One plan's servers, kept up until stopped. Methods are coroutines on the caller's event loop."""

    def __init__(
        self,
        plan: Plan,
        *,
        on_event: EventCallback,
        results_dir: str | Path = "results",
        target: Target | None = None,
    ):
        self.plan = plan
        self.on_event = on_event
        self.results_dir = Path(results_dir)
        self.target = target
        self._own_target = target is None
        self.members = {v.name: _Member(v) for v in plan.variants}
        self.session_id: str | None = None
        self.session_dir: Path | None = None
        self.version: str | None = None  # the plan's own engine's
        self.versions: dict[str, str | None] = {}  # engine name -> version, for a plan with several engines
        self._opened = False
        self._open_lock = asyncio.Lock()
        # live alarms as in a run: drafter-inert, cuda-graph-off from each window; slower-than-baseline
        self.alarms = AlarmTracker(plan)
        self.speed = LiveSpeed(next((v.name for v in plan.variants if v.is_baseline), None))

    # ---- queries -------------------------------------------------------------------------------------
    def status(self, name: str) -> MemberStatus:
        m = self._member(name)
        return MemberStatus(name, m.state, m.port, m.pgid, m.started_at, m.ready_at, m.detail)

    def uptime(self, name: str, now: float | None = None) -> float | None:
        """Seconds since the server became ready, None unless it is ready."""
        m = self._member(name)
        if m.state != "ready" or m.ready_at is None:
            return None
        return (time.monotonic() if now is None else now) - m.ready_at

    def base_url(self, name: str) -> str | None:
        """http://host:port reaching the variant's server from here, while it is ready."""
        m = self._member(name)
        if m.state != "ready":
            return None
        return m.server.base_url if m.server is not None else m.url

    def live(self) -> list[str]:
        """Variants whose server is up or on its way (what quitting would stop)."""
        return [n for n, m in self.members.items() if m.state in ("starting", "ready", "stopping")]

    def _member(self, name: str) -> _Member:
        try:
            return self.members[name]
        except KeyError:
            raise HarnessError(f"no variant named {name!r} in plan {self.plan.name!r}") from None

    # ---- setup ---------------------------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect to the target and detect the SGLang version (once)."""
        async with self._open_lock:
            if self._opened:
                return

            if self.target is None:
                t = self.plan.target
                self.target = open_target(t.host, ssh_port=t.ssh_port)
            await self.target.connect()
            self.version = await engine_of(self.plan).detect_version(self.plan, self.target)
            for v in self.plan.variants:
                engine = engine_of(self.plan, v)
                if engine.name not in self.versions:
                    self.versions[engine.name] = (self.version if engine.name == engine_of(self.plan).name
                                                  else await engine.detect_version(self.plan, self.target))
            self._opened = True

    async def open(self) -> None:
        """connect(), then the session directory for the servers' logs (created on the first start)."""
        await self.connect()
        if self.session_dir is None:
            self.session_id, self.session_dir = new_run_dir(self.results_dir / "servers", self.plan.name)

    async def adopt(self) -> list[str]:
        """Take over this plan's servers that an earlier draftbench started and left running (servers.jsonl
        under the results dir): they show as ready with their port, pgid and uptime and can be stopped."""
        await self.connect()
        adopted = []
        listed = [k for k in kept_servers(self.results_dir, self.plan.name) if k.target == self.target.name]
        workdir = await self.target.makedirs_private(self.plan.target.workdir)
        try:  # and those started with another results dir, found by their pgid files in the workdir
            elsewhere = await workdir_servers(self.target, workdir, self.plan.name)
        except Exception:
            elsewhere = []
        known = {k.pgid for k in listed}
        for k in [*listed, *(w for w in elsewhere if w.pgid not in known)]:
            m = self.members.get(k.variant)
            if m is None or m.state != "stopped" or k.port is None:
                continue
            if k.jsonl is not None and not await still_ours(self.target, k):  # alive, its pid file agrees
                continue
            host, lport = await self.target.forward(self.plan.server.host, k.port)
            m.adopted, m.url = k, f"http://{host}:{lport}"
            since = time.monotonic() - max(0.0, time.time() - k.started_wall)
            self._set(m, "ready", started_at=since, ready_at=since, port=k.port, pgid=k.pgid,
                      detail=f"adopted: left running ({k.state}) by {k.started_by}")
            adopted.append(k.variant)
        return adopted

    async def check(self) -> list[Finding]:
        """`draftbench check` on this plan's target: the preflight findings (harness.checks.Finding) as they
        are."""
        await self.connect()
        return await run_checks(self.plan, self.target, versions=self.versions)

    async def preflight(self) -> list[ev.Alarm]:
        """The preflight checks' findings as Alarm events (also sent to the callback); [] without checks."""
        try:
            await self.connect()
            found = await run_checks(self.plan, self.target, versions=self.versions)
            alarms = [finding_to_alarm(f) for f in found]
        except Exception as exc:  # a broken check must not take the servers down with it
            alarms = [ev.Alarm("", "warning", "checks-failed", f"preflight checks could not run: {exc}")]
        for a in alarms:
            self.on_event(a)
        return alarms

    # ---- lifecycle -----------------------------------------------------------------------------------
    async def start(self, name: str) -> MemberStatus:
        """Start one variant's server and wait until it is ready or has failed; a no-op when it is up."""
        m = self._member(name)
        if m.starting is None or m.starting.done():
            if m.state == "ready":
                return self.status(name)
            m.starting = asyncio.create_task(self._start(m), name=f"fleet-start-{name}")
        # the start goes on if this caller is cancelled (stop() cancels the start itself); a failure the
        # start does not record as the server's state is raised here, as before
        await reap(m.starting)
        if not m.starting.cancelled() and (exc := m.starting.exception()) is not None:
            raise exc
        return self.status(name)

    async def _start(self, m: _Member) -> None:
        name = m.variant.name
        if m.server is not None:  # a failed or stopped earlier attempt: make sure nothing is left of it
            await self._teardown(m)
        self._set(m, "starting", started_at=time.monotonic(), ready_at=None, detail="", port=None, pgid=None)
        try:
            await self.open()
            self._check_port(name)
            assert self.session_id is not None and self.session_dir is not None
            m.starts += 1  # a fresh remote directory per start: the new log is tailed from its beginning
            m.server = Server(
                self.target,
                self.plan,
                m.variant,
                run_id=f"{self.session_id}/{name}-{m.starts}",
                run_dir=self.session_dir,
                engine_version=self.versions.get(engine_of(self.plan, m.variant).name, self.version),
                on_lines=lambda lines, s=name: self._on_lines(s, lines),
            )
            await m.server.start()
            self._set(m, "starting")  # now with port and process group
            await m.server.wait_ready(self.plan.server.startup_timeout_s)
            self._set(m, "ready", ready_at=time.monotonic())
        except asyncio.CancelledError:
            await asyncio.shield(self._teardown(m))
            self._set(m, "stopped", started_at=None, port=None, pgid=None)
            raise
        except ServerFailed as exc:
            await self._teardown(m)
            self._set(m, "failed", detail=f"{exc.reason}\n" + "\n".join(exc.last_lines[-50:]))
        except (HarnessError, OSError) as exc:
            await self._teardown(m)
            self._set(m, "failed", detail=str(exc))

    def _check_port(self, name: str) -> None:
        """A pinned server.port fits one server at a time: refuse a second one with a clear reason."""
        port = self.plan.server.port
        if not isinstance(port, int):
            return
        busy = [n for n, o in self.members.items() if n != name and o.state in ("starting", "ready")]
        if busy:
            raise HarnessError(
                f"the plan pins server.port {port} and '{busy[0]}' is using it: stop it "
                "first, or set server.port: auto"
            )

    async def stop(self, name: str) -> MemberStatus:
        """Stop one variant's server (cancels a start in progress); its process group is killed."""
        m = self._member(name)
        if m.starting is not None and not m.starting.done():
            m.starting.cancel()
            await reap(m.starting)
            return self.status(name)
        if m.server is None and m.adopted is not None:
            return await self._stop_adopted(m)
        if m.server is None:
            if m.state != "stopped":
                self._set(m, "stopped", started_at=None, ready_at=None, port=None, pgid=None)
            return self.status(name)
        self._set(m, "stopping")
        gone = await self._teardown(m)
        if gone:
            self._set(m, "stopped", started_at=None, ready_at=None, detail="", port=None, pgid=None)
        else:
            self._set(m, "failed", detail="processes left after SIGKILL")
        return self.status(name)

    async def _stop_adopted(self, m: _Member) -> MemberStatus:
        kept, m.adopted, m.url = m.adopted, None, None
        self._set(m, "stopping")
        try:
            gone = await self.target.kill_group(kept.pgid)
        except Exception:
            gone = False
        record_stopped(kept, gone, "tui")
        if gone:
            self._set(m, "stopped", started_at=None, ready_at=None, detail="", port=None, pgid=None)
        else:
            self._set(m, "failed", detail="processes left after SIGKILL")
        return self.status(m.variant.name)

    async def restart(self, name: str) -> MemberStatus:
        await self.stop(name)
        return await self.start(name)

    async def start_all(self) -> list[MemberStatus]:
        """One after another: servers on one GPU node compete for memory while loading."""
        return [await self.start(name) for name in self.members]

    async def stop_all(self) -> list[MemberStatus]:
        return list(await asyncio.gather(*(self.stop(name) for name in self.members)))

    async def close(self, *, keep: bool = False) -> None:
        """Stop every server (unless keep) and close the target connection this fleet opened."""
        if keep:
            for m in self.members.values():
                if m.server is not None:
                    with contextlib.suppress(Exception):
                        await m.server.stop(keep=True)
        else:
            await self.stop_all()
        if self._own_target and self.target is not None:
            with contextlib.suppress(Exception):
                await self.target.close()

    async def _teardown(self, m: _Member) -> bool:
        server, m.server = m.server, None
        if server is None:
            return True
        try:
            return await server.stop()
        except Exception:  # the target link may be gone; the state says failed and the log says why
            return False

    # ---- telemetry -----------------------------------------------------------------------------------
    async def gpu_memory(self) -> dict[str, int]:
        """MiB of GPU memory held by each running server ({} on the stand-in or without nvidia-smi)."""
        pgids = {n: m.pgid for n, m in self.members.items() if m.server is not None and m.pgid is not None}
        if not pgids or self.plan.target.simulated or self.target is None:
            return {}
        smi = await self.target.run(GPU_QUERY, timeout=30)
        ps = await self.target.run(PS_QUERY, timeout=30)
        if smi.rc != 0 or ps.rc != 0:
            return {}
        return parse_gpu_memory(smi.stdout, ps.stdout, pgids)

    # ---- events --------------------------------------------------------------------------------------
    def _set(self, m: _Member, state: str, **changes: object) -> None:
        for key, value in changes.items():
            setattr(m, key, value)
        if m.server is not None:
            m.port, m.pgid = m.server.port, m.server.pgid
        m.state = state
        self.on_event(ev.ServerState(m.variant.name, state, m.port, m.pgid, m.detail))

    def _on_lines(self, name: str, lines: list[str]) -> None:
        self.on_event(ev.ServerLog(name, tuple(lines)))
        server = self.members[name].server
        first = (server.lines_seen if server else len(lines)) - len(lines) + 1
        for i, text in enumerate(lines):
            w = server.engine.parse_log_line(text, first + i) if server else None
            if w is not None:
                self.on_event(ev.LogWindow(name, w, None))
                for alarm in (*self.alarms.feed(name, w), *self.speed.feed(name, w)):
                    self.on_event(alarm)
