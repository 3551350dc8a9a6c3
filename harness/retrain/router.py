"""N data-parallel servers of the target behind sglang-router, for regeneration at scale.

Everything runs on the plan's target and through the engines people run: each worker is the plan's
baseline server (its own port, and its own slice of CUDA_VISIBLE_DEVICES when the plan lists GPUs), and
`python -m sglang_router.launch_router --worker-urls ...` balances over them. The router is spawned and
tracked like a server (its process group in servers.jsonl, stopped at the end). Per-worker progress
comes from each worker's own log: the requests it answered (access lines) and its last decode window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from harness.common.errors import HarnessError, InputError
from harness.serve.server import Server, ServerFailed
from harness.targets.base import free_port

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.targets.base import Target

ROUTER_MODULE = "sglang_router.launch_router"
ROUTER_READY_S = 120.0


SHARE_LIMIT = 0.9  # workers sharing GPUs: their mem_fraction_static together stay under this


def shares_gpus(env: dict[str, str], workers: int, tp_size: int) -> bool:
    """True when the workers must share GPUs: fewer listed than workers x tp_size."""
    visible = [g for g in str(env.get("CUDA_VISIBLE_DEVICES", "")).split(",") if g.strip()]
    return bool(visible) and workers * tp_size > len(visible)


def worker_envs(env: dict[str, str], workers: int, tp_size: int, simulated: bool,
                mem_fraction: float | None = None) -> list[dict[str, str]]:
    """Each worker's environment: its own tp_size GPUs out of CUDA_VISIBLE_DEVICES when there are enough;
    small models may share GPUs when server.mem_fraction_static says they fit (workers x it <= 0.9)."""
    visible = [g.strip() for g in str(env.get("CUDA_VISIBLE_DEVICES", "")).split(",") if g.strip()]
    if not visible:
        if workers > 1 and not simulated:
            raise InputError(None, None, "target.env.CUDA_VISIBLE_DEVICES",
                             f"{workers} workers need their GPUs named: list at least {workers * tp_size} "
                             "GPU ids so that each worker gets its own")
        return [dict(env) for _ in range(workers)]
    if workers * tp_size > len(visible):
        groups = len(visible) // tp_size
        per_gpu = -(-workers // groups) if groups else workers
        if not groups or mem_fraction is None or per_gpu * mem_fraction > SHARE_LIMIT:
            raise InputError(None, None, "workers",
                             f"{workers} workers x tp_size {tp_size} need {workers * tp_size} "
                             f"GPUs; CUDA_VISIBLE_DEVICES lists {len(visible)} (to share them, set "
                             f"server.mem_fraction_static so that {per_gpu} servers fit on one GPU: "
                             f"{per_gpu} x it <= {SHARE_LIMIT})")
        return [{**env,
                 "CUDA_VISIBLE_DEVICES": ",".join(visible[(i % groups) * tp_size:(i % groups + 1) * tp_size])}
                for i in range(workers)]
    return [{**env, "CUDA_VISIBLE_DEVICES": ",".join(visible[i * tp_size:(i + 1) * tp_size])}
            for i in range(workers)]


def router_argv(python: str, host: str, port: int, worker_urls: list[str], *, metrics_port: int,
                policy: str = "cache_aware") -> list[str]:
    """The router's own /metrics listener gets a free port too: its default (29000) is taken as soon as a
    second router runs on the node."""
    return [python, "-m", ROUTER_MODULE, "--host", host, "--port", str(port), "--policy", policy,
            "--prometheus-host", host, "--prometheus-port", str(metrics_port), "--worker-urls", *worker_urls]


@dataclass
class WorkerStats:
    name: str
    requests: int = 0
    running: int | None = None
    gen_tok_s: float | None = None

    def note(self) -> str:
        run = f", {self.running} running" if self.running is not None else ""
        tps = f", {self.gen_tok_s:.0f} tok/s" if self.gen_tok_s is not None else ""
        return f"{self.name}: {self.requests} answered{run}{tps}"


class RouterFleet:
    """The workers and the router of one regeneration."""

    def __init__(self, target: Target, plan: Plan, workers: int, *, run_id: str, run_dir: Path,
                 version: str | None, router_port: int | None = None):
        if workers < 1:
            raise InputError(None, None, "workers", f"must be at least 1, got {workers}")
        self.target, self.plan, self.run_id, self.run_dir = target, plan, run_id, Path(run_dir)
        self.router_port = router_port
        env = {str(k): str(v) for k, v in (plan.target.env or {}).items()}
        mem = plan.server.mem_fraction_static
        envs = worker_envs(env, workers, int(plan.model.tp_size), bool(plan.target.simulated), mem)
        # servers sharing a GPU start one after the other: each sizes its memory from what is free
        self.one_by_one = shares_gpus(env, workers, int(plan.model.tp_size))
        self.servers: list[Server] = []
        self.stats: list[WorkerStats] = []
        base = plan.baseline
        for i, env in enumerate(envs):
            name = f"{base.name}-w{i}"
            wplan = plan.model_copy(update={"target": plan.target.model_copy(update={"env": env})})
            stats = WorkerStats(name)
            self.stats.append(stats)
            self.servers.append(Server(target, wplan, base.model_copy(update={"name": name}), run_id=run_id,
                                       run_dir=run_dir, engine_version=version,
                                       on_lines=lambda lines, s=stats, i=i: self._on_lines(i, s, lines)))
        self.router_pgid: int | None = None
        self.router_url = ""  # the OpenAI base (…/v1) reachable from here
        self._session: aiohttp.ClientSession | None = None

    def _on_lines(self, i: int, stats: WorkerStats, lines: list[str]) -> None:
        server = self.servers[i]
        first = server.lines_seen - len(lines) + 1
        for n, text in enumerate(lines):
            if '"POST /v1/chat/completions' in text and '" 200' in text:
                stats.requests += 1
            w = server.engine.parse_log_line(text, first + n)
            if w is not None and w.kind == "decode":
                stats.running, stats.gen_tok_s = w.running_req, w.gen_throughput

    async def settle(self, quiet_s: float = 0.3, limit_s: float = 3.0) -> None:
        """Wait until no worker's log has grown for `quiet_s` (bounded): the numbers are then final."""
        deadline = time.monotonic() + limit_s
        seen = [s.lines_seen for s in self.servers]
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < quiet_s:
            await asyncio.sleep(0.05)
            now = [s.lines_seen for s in self.servers]
            if now != seen:
                seen, quiet_since = now, time.monotonic()

    def progress(self) -> tuple[str, ...]:
        return tuple(s.note() for s in self.stats)

    async def start(self, on_state: Callable[[str], None] | None = None) -> str:
        """Start every worker, wait until all are ready, then the router; returns the router's base URL."""
        timeout = self.plan.server.startup_timeout_s
        if self.one_by_one:
            for s in self.servers:
                await s.start()
                await s.wait_ready(timeout)
        else:
            await asyncio.gather(*(s.start() for s in self.servers))
            await asyncio.gather(*(s.wait_ready(timeout) for s in self.servers))
        if on_state is not None:
            on_state(f"{len(self.servers)} workers ready")
        host = str(self.plan.server.host)
        port = self.router_port or await free_port(self.target)
        workdir = await self.target.makedirs_private(self.plan.target.workdir)
        rundir = f"{workdir}/runs/{self.run_id}"
        argv = router_argv(str(self.plan.target.python), host, port,
                           [f"http://{host}:{s.port}" for s in self.servers],
                           metrics_port=await free_port(self.target))
        log = f"{rundir}/router.log"
        self.router_pgid = await self.target.spawn(argv, env={}, cwd=workdir, log_path=log,
                                                   pid_path=f"{rundir}/router.pgid")
        self._record({"variant": "router", "pgid": self.router_pgid, "port": port, "argv": argv,
                      "remote_log": log, "target": self.target.name, "state": "started"})
        lhost, lport = await self.target.forward(host, port)
        base = f"http://{lhost}:{lport}"
        await self._wait_router(base, log)
        self.router_url = base + "/v1"
        return self.router_url

    async def _wait_router(self, base: str, log: str) -> None:
        self._session = aiohttp.ClientSession()
        deadline = time.monotonic() + ROUTER_READY_S
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                async with self._session.get(base + "/v1/models",
                                             timeout=aiohttp.ClientTimeout(total=5)) as r:
                    if r.status == 200:
                        return
            if self.router_pgid is not None and not await self.target.alive(self.router_pgid):
                tail = (await self.target.read_file(log)).decode("utf-8", "replace").splitlines()[-20:]
                raise ServerFailed("router", "exited before it became ready (is sglang-router installed for "
                                   f"{self.plan.target.python}?)", tail)
            await asyncio.sleep(0.25)
        raise HarnessError(f"sglang-router did not answer within {ROUTER_READY_S:.0f} s")

    def _record(self, entry: dict[str, Any]) -> None:
        with open(self.run_dir / "servers.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self.router_pgid is not None:
            gone = await self.target.kill_group(self.router_pgid)
            self._record({"variant": "router", "pgid": self.router_pgid,
                          "state": "stopped" if gone else "stop-failed"})
        await asyncio.gather(*(s.stop() for s in self.servers), return_exceptions=True)
