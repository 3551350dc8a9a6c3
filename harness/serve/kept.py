"""Servers draftbench started and left running: found again from the servers.jsonl files under a results dir,
or from the pgid files in the target's workdir (`<workdir>/runs/<run-id>/.../<variant>.pgid`) for servers
started with another results dir.

A run with keep_servers, a TUI quit that kept its servers, or a harness killed mid-run leaves entries whose
last state is "kept" or "started"; a front end adopts the live ones (state, port, pgid, uptime) so it can
show and stop them instead of forgetting them. GPU room decides whether a kept server may stay up while
the next variant is measured.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.analysis.rundir import append_jsonl, leftover_servers
from harness.common import events as ev
from harness.targets import open_target

if TYPE_CHECKING:
    from harness.engines.base import Engine, EngineAdmin
    from harness.inputs.config import Plan
    from harness.targets.base import Target

LIVE_STATES = ("started", "kept")  # last entry of a process group that nobody stopped


class VariantServer(Protocol):
    """What a run asks of a variant's server, whether draftbench started it (`harness.serve.server.Server`,
    which imports this module) or only measures it (`harness.serve.existing.ExistingServer`)."""

    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def port(self) -> int | None: ...
    @property
    def pgid(self) -> int | None: ...
    @property
    def admin(self) -> EngineAdmin | None: ...
    @property
    def stop_lines(self) -> int: ...  # the engine's crash-looking shutdown lines seen since our TERM
    async def stop(self, *, keep: bool = False, term_timeout: float = 20.0) -> bool: ...


@dataclass(frozen=True)
class KeptServer:
    variant: str
    pgid: int
    port: int | None
    target: str
    started_wall: float  # time.time() of the start (the file's mtime for entries written before "wall")
    jsonl: Path | None  # where its entries live: a stop appends there (None: found in the workdir only)
    state: str  # "kept" or "started" (the harness that started it went away without stopping it)
    pid_path: str = ""  # the process group file in the target's workdir (run dir of the start)
    argv: tuple[str, ...] = ()  # its launch command as recorded (API keys redacted): what adoption matches
    remote_log: str = ""  # its log on the target

    @property
    def started_by(self) -> str:
        """The run (or Servers session) that started it."""
        if self.jsonl is not None:
            return self.jsonl.parent.name
        return self.pid_path.split("/runs/", 1)[-1].split("/", 1)[0]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def kept_servers(results_dir: str | Path, plan_name: str | None = None) -> list[KeptServer]:
    """Every process group under results_dir (runs, Servers sessions, regen) whose last entry is live;
    only directories of `plan_name` when given. Newest first; liveness is the caller's to check."""
    root = Path(results_dir)
    files = [*root.glob("*/servers.jsonl"), *root.glob("servers/*/servers.jsonl")]
    if plan_name is not None:
        slug = _slug(plan_name)
        stamped = rf"\d{{8}}-\d{{6}}-{re.escape(slug)}(-\d+)?"
        files = [f for f in files if re.fullmatch(stamped, f.parent.name)]
    out: list[KeptServer] = []
    for path in files:
        last: dict[int, dict[str, Any]] = {}
        started: dict[int, dict[str, Any]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            mtime = path.stat().st_mtime
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            pgid = entry.get("pgid")
            if isinstance(pgid, int):
                last[pgid] = entry
                if entry.get("state") == "started":
                    started[pgid] = entry
        for pgid, entry in last.items():
            if pgid in started and entry.get("state") in LIVE_STATES:
                s = started[pgid]
                out.append(KeptServer(str(s.get("variant", "")), pgid, s.get("port"),
                                      str(s.get("target", "local")), float(s.get("wall") or mtime), path,
                                      str(entry["state"]),
                                      str(s.get("pid_path") or ""), tuple(s.get("argv") or ()),
                                      str(s.get("remote_log") or "")))
    return sorted(out, key=lambda k: -k.started_wall)


def _plan_dir(run_id: str, plan_name: str) -> bool:
    """A run directory of that plan: `<stamp>-<slug>`, a node's `<stamp>-<slug>@<node>` too."""
    stamp = rf"\d{{8}}-\d{{6}}-{re.escape(_slug(plan_name))}(-\d+)?"
    return re.fullmatch(stamp + r"(@.+)?", run_id) is not None


def server_port(args: str) -> int | None:
    """The port of an engine server from its command line (`--port N` or `--port=N`); None when it is not
    one (no --port, or neither SGLang's --model-path nor `vllm serve`)."""
    words = args.split()
    if not any(w == "serve" or w.startswith("--model-path") for w in words):
        return None
    for i, w in enumerate(words):
        if w == "--port" and i + 1 < len(words) and words[i + 1].isdigit():
            return int(words[i + 1])
        if w.startswith("--port=") and w[7:].isdigit():
            return int(w[7:])
    return None


async def workdir_servers(target: Target, workdir: str, plan_name: str | None = None) -> list[KeptServer]:
    """Live engine servers named by the pgid files under `<workdir>/runs/` on the target, whatever results
    dir their run used: the pid file names the group, the group is alive and its leader's argv is an engine
    server's (the port comes from there). Newest first."""
    runs = f"{workdir.rstrip('/')}/runs"
    found = await target.run(["find", runs, "-maxdepth", "3", "-name", "*.pgid", "-type", "f"], timeout=30)
    out: list[KeptServer] = []
    for path in found.stdout.split("\n"):
        path = path.strip()
        if not path.startswith(runs + "/"):
            continue
        if plan_name is not None and not _plan_dir(path[len(runs) + 1:].split("/", 1)[0], plan_name):
            continue
        try:
            text = (await target.read_file(path, max_bytes=64)).decode().strip()
        except Exception:
            continue
        if not text.isdigit() or not await target.alive(int(text)):
            continue
        pgid = int(text)
        ps = await target.run(["ps", "-ww", "-o", "etimes=", "-o", "args=", "-p", str(pgid)], timeout=30)
        up, _, args = ps.stdout.strip().partition(" ")
        port = server_port(args) if ps.rc == 0 and up.strip().isdigit() else None
        if port is None:
            continue
        variant = path.rsplit("/", 1)[1][: -len(".pgid")]
        out.append(KeptServer(variant, pgid, port, target.name, time.time() - int(up), None, "kept", path))
    return sorted(out, key=lambda k: -k.started_wall)


async def still_ours(target: Target, kept: KeptServer) -> bool:
    """Alive, and the target's workdir still names this process group for it (a reboot can hand the same
    pgid to another program: then the pid file is gone or differs)."""
    if not await target.alive(kept.pgid):
        return False
    if not kept.pid_path:
        return True  # entries from before pid files were recorded: liveness is all there is
    try:
        text = (await target.read_file(kept.pid_path, max_bytes=64)).decode().strip()
    except Exception:
        return False
    return text == str(kept.pgid)


def record_stopped(kept: KeptServer, gone: bool, by: str) -> None:
    if kept.jsonl is None:  # found in the workdir: its run's servers.jsonl is under a results dir not ours
        return
    append_jsonl(kept.jsonl, {"variant": kept.variant, "pgid": kept.pgid,
                              "state": "stopped" if gone else "stop-failed", "by": by})


def gpu_has_room(plan: Plan, servers_up: int) -> bool:
    """May `servers_up` servers stay up next to one more? Only when the plan says so: the stand-in uses no
    GPU, or server.mem_fraction_static leaves room for every one of them (at most 0.9 in all)."""
    if plan.target.simulated:
        return True
    frac = plan.server.mem_fraction_static
    return frac is not None and (servers_up + 1) * frac <= 0.9


async def reap_leftovers(target: Target, run_dir: Path, emit: Callable[[ev.ServerState], None]) -> None:
    """Servers the interrupted run started and never stopped (the harness itself was killed): stop them
    now, so a resumed run never leaves a GPU server behind. Servers kept on purpose stay."""
    for entry in leftover_servers(run_dir / "servers.jsonl"):
        pgid = int(entry["pgid"])
        gone = await target.kill_group(pgid) if await target.alive(pgid) else True
        append_jsonl(run_dir / "servers.jsonl", {"variant": entry["variant"], "pgid": pgid,
                                                 "state": "stopped" if gone else "stop-failed",
                                                 "by": "resume"})
        emit(ev.ServerState(entry["variant"], "stopped" if gone else "failed", entry.get("port"), pgid,
                            "left running by the interrupted run"))


async def make_room(plan: Plan, kept: list[VariantServer], emit: Callable[[ev.ServerState], None]) -> None:
    """A kept server stays up while the next variant is measured only when the plan says the GPU has room
    (gpu_has_room); else it is stopped now, so only the last variant's stays."""
    while kept and not gpu_has_room(plan, len(kept)):
        server = kept.pop(0)
        emit(ev.ServerState(server.name, "stopping", server.port, server.pgid,
                            "the next variant needs the GPU"))
        gone = await server.stop()
        emit(ev.ServerState(server.name, "stopped" if gone else "failed", server.port, server.pgid,
                            "stopped: no GPU room for a kept server (server.mem_fraction_static)"))


async def stop_kept_servers(plan: Plan, target: Target | None, kept: list[KeptServer], *, by: str) -> None:
    """Stop these kept servers by process group, each checked against its pid file first (a reused pgid is
    never killed), and record it in its servers.jsonl. `target` None: the plan's, opened for this."""
    if not kept:
        return
    own = target is None
    target = target or open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    try:
        await target.connect()
        for k in kept:
            ours = await target.alive(k.pgid) and await still_ours(target, k)
            record_stopped(k, await target.kill_group(k.pgid) if ours else True, by=by)
    finally:
        if own:
            await target.close()
