"""The whole comparison as one async generator of events: start each variant's server, replay the
suites at each concurrency, collect accept length from three sources, stop the server, summarise.

Everything is written to the run directory as it happens (records first, tables derived later).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis import attempts as tries
from harness.analysis.alarms import AlarmTracker
from harness.analysis.outputs import OUTPUT_COLUMNS
from harness.analysis.records import RECORD_COLUMNS, make_record
from harness.analysis.rundir import PHASE_COLUMNS, SERVER_WINDOW_COLUMNS, new_run_dir
from harness.analysis.store import CsvAppender, PhaseRecord, VariantMeta, append_record, append_variant
from harness.bench import audit, run_servers
from harness.bench.arrivals import max_connections, replay_rate_phase
from harness.bench.conversation import requests_per_pass
from harness.bench.decide import interleaved, more_repeats
from harness.bench.lock import RunDirLock
from harness.bench.run_phases import (  # noqa: F401  (phase_id, rate_phase_id: read from here by others)
    one_off,
    phase_id,
    plan_phases,
    rate_phase_id,
    require_levels,
    settle_total,
    sizer_for,
)
from harness.bench.run_record import log_catch_up, summarise_at_end, write_provenance
from harness.bench.sampling_client import any_greedy, with_sampling
from harness.bench.sizing import sized_passes
from harness.checks.realism import realism_alarms
from harness.common import events as ev
from harness.common.aio import drain, finish
from harness.engines import engine_of
from harness.inputs.endpoints import api_key
from harness.serve.existing import ExistingServer, as_served, unauthorized
from harness.serve.kept import reap_leftovers
from harness.serve.server import Server, ServerFailed

if TYPE_CHECKING:
    from harness.bench.run_phases import Phase
    from harness.client.stream import ReplayClient
    from harness.common.aio import Emit
    from harness.inputs.config import Plan, Variant
    from harness.inputs.suites import Prompt, Suite
    from harness.serve.kept import KeptServer, VariantServer
    from harness.targets.base import Target


async def run_plan(plan: Plan, *, results_dir: str | Path = "results", keep_servers: bool = False,
                   resume_dir: str | Path | None = None, target: Target | None = None,
                   adopt: list[KeptServer] | None = None, remote_id: str | None = None) -> AsyncIterator[Any]:
    """Run the plan; yields events from harness.common.events. Closing the generator stops every server.
    `adopt`: other runs' kept servers that a variant with the same command takes over
    (harness.serve.adopt). `remote_id`: the run's directory under `<workdir>/runs/` on the target (its
    servers' logs and pgid files), by default the run directory's own name; a part of a bigger study whose
    part names repeat from one study to the next (a tune's `wide`) gets one under the study's own."""
    def start(emit: Emit) -> Awaitable[None]:
        return _Run(plan, results_dir=Path(results_dir), keep_servers=keep_servers, adopt=adopt,
                    resume_dir=Path(resume_dir) if resume_dir else None, target=target, emit=emit,
                    remote_id=remote_id).main()

    async with contextlib.aclosing(drain(start, name="draftbench-run")) as events:
        async for event in events:  # closing us closes the drain, which stops every server
            yield event


class _Run:
    def __init__(self, plan: Plan, *, results_dir: Path, keep_servers: bool, resume_dir: Path | None,
                 target: Target | None, emit: Emit, adopt: list[KeptServer] | None = None,
                 remote_id: str | None = None):
        self.plan = plan
        self._remote_id = remote_id
        self.emit = emit
        self.keep = keep_servers or bool(plan.server.keep_running)
        self.resume_dir = resume_dir
        self.results_dir = results_dir
        self.target = target
        self.own_target = target is None
        self.servers: list[Server | ExistingServer] = []
        # kept servers, oldest first: stopped when the next variant needs the GPU
        self.kept: list[VariantServer] = []
        # other runs' kept servers, for a variant to adopt (harness.serve.adopt)
        self.offered = list(adopt or [])
        # never pruned: the last log lines arrive after the stop
        self._log_owner: dict[str, Server | ExistingServer] = {}
        self.phase_tag: dict[str, str | None] = {}
        self.phase_rate: dict[str, float] = {}  # request-rate phases: phase id -> arrivals per second
        self.alarms = AlarmTracker(plan)
        self.versions: dict[str, str | None] = {}  # engine name -> version, asked once per engine
        # run.stop: decided keeps servers up between looks (GPU room rules)
        self.parked: dict[str, Server | ExistingServer] = {}
        self.metas: dict[str, VariantMeta] = {}  # a parked server's metadata, for the next look's record
        # (variant, suite, conc) -> passes its phases run
        self.pass_count: dict[tuple[str, str, int], int] = {}
        self.warmed: set[str] = set()
        self.probed: set[tuple[str, str]] = set()  # (variant, "suite@cN"): greedy acceptance is probed once
        budget = plan.run.budget_s
        # run.budget_s (harness.bench.decide)
        self.deadline: float | None = time.monotonic() + float(budget) if budget else None
        self.failures = 0
        self.failed: set[str] = set()
        self.request_errors = 0
        self.done_requests = 0
        self.total_requests = 0

    # ------------------------------------------------------------------------------------------------
    async def main(self) -> None:
        require_levels(self.plan)  # run.concurrency: auto is a search (tune's), never a run at c1 alone
        if self.resume_dir:
            self.run_dir = self.resume_dir
            self.run_id = self.run_dir.name
        else:
            self.run_id, self.run_dir = new_run_dir(self.results_dir, self.plan.name)
        self.remote_id = self._remote_id or self.run_id
        with RunDirLock(self.run_dir):  # a second run of this directory stops here, having touched nothing
            await self._main()

    async def _main(self) -> None:
        from harness.targets import open_target

        plan = self.plan
        # done = a phases.csv row; an unfinished phase is rerun whole (harness.analysis.attempts says why)
        self.done = tries.done_phases(self.run_dir)
        self.done_requests = self.done.requests  # a resumed run's progress counts what is already done
        self.pass_count = sized_passes(self.run_dir / "phases.csv")
        self.records = tries.CountingAppender(self.run_dir / "requests.csv", RECORD_COLUMNS)
        # greedy outputs, for the output check against the baseline (harness.analysis.outputs)
        self.outputs = tries.CountingAppender(self.run_dir / "outputs.csv", OUTPUT_COLUMNS) \
            if any_greedy(plan) else None
        self.phases = CsvAppender(self.run_dir / "phases.csv", PHASE_COLUMNS)
        self.windows = tries.CountingAppender(self.run_dir / "server_windows.csv", SERVER_WINDOW_COLUMNS)
        self.attempts = CsvAppender(self.run_dir / tries.ATTEMPTS_FILE, tries.ATTEMPT_COLUMNS)
        for f in (self.records, self.phases, self.windows, self.outputs):
            if f is not None and f.repaired:  # a file cut mid-row by a kill or a full disk
                self.emit(ev.Alarm("", "warning", "records-repaired", f.repaired))
        complete = False
        try:
            if self.target is None:
                t = plan.target
                self.target = open_target(t.host, ssh_port=t.ssh_port)
            await self.target.connect()
            if self.resume_dir:
                await reap_leftovers(self.target, self.run_dir, self.emit)
            for variant in plan.variants:
                engine = engine_of(plan, variant)
                if engine.name not in self.versions:
                    self.versions[engine.name] = await engine.detect_version(plan, self.target)
            write_provenance(self, self.versions, status="running")
            for variant in plan.variants:  # a missing API key variable fails here, before any server starts
                api_key(plan, variant)
            per_variant = requests_per_pass(plan) * plan.run.repeats
            self.total_requests = per_variant * len(plan.variants)
            self.emit(ev.RunStarted(self.run_id, str(self.run_dir), plan.name,
                                    tuple(v.name for v in plan.variants), self.total_requests,
                                    bool(plan.target.simulated)))
            # prompts unlike real traffic's: said before anything is measured
            for alarm in realism_alarms(plan):
                self.emit(alarm)
            # the SDK import takes ~1 s: pay it before any server is ready
            import harness.client.stream  # noqa: F401

            ordered = sorted(plan.variants, key=lambda v: not v.is_baseline)
            # the stopping rule keeps servers up between looks (GPU room rules); all stop together at the end
            park = plan.run.stop == "decided"
            if park and interleaved(plan):  # every server stays up: repeat by repeat, the arms side by side
                for repeat in range(1, plan.run.repeats + 1):
                    for variant in ordered:
                        await self._run_variant(variant, self.versions[engine_of(plan, variant).name],
                                                [repeat], park=True)
            else:
                for variant in ordered:
                    await self._run_variant(variant, self.versions[engine_of(plan, variant).name], park=park)
            await more_repeats(self, ordered)
            complete = self.failures == 0
        finally:
            self.parked.clear()
            # every server is stopped, together, even when this task is cancelled meanwhile (a closed
            # generator, a second Ctrl-C): the cancellation is re-raised once the files are closed and the
            # summary written
            cancelled = await finish(asyncio.gather(*(run_servers.stop(self, s) for s in list(self.servers)),
                                                    return_exceptions=True))
            for f in (self.records, self.phases, self.windows, self.attempts,
                      *([self.outputs] if self.outputs else [])):
                f.close()
            summary_csv = summarise_at_end(self, complete)
            if self.own_target and self.target is not None:
                with contextlib.suppress(Exception):
                    await self.target.close()
            if cancelled:
                raise asyncio.CancelledError
        self.emit(ev.RunDone(str(self.run_dir), complete and bool(summary_csv), self.failures, summary_csv,
                             {"request_errors": self.request_errors}))

    async def _run_variant(self, variant: Variant, version: str | None, repeats: list[int] | None = None,
                           only: set[int] | None = None, park: bool = False) -> None:
        """Measure `variant`'s phases (those of `repeats` at the concurrencies `only`, default all). `park`:
        leave its server up afterwards for the stopping rule's next look (harness.bench.decide)."""
        name = variant.name
        todo = plan_phases(self, variant, repeats, only)
        if not todo:
            return  # resumed: nothing left for this variant
        parked = self.parked.pop(name, None)
        if parked is not None and await parked.alive():
            await self._measure_on(variant, parked, self.metas[name].model_copy(deep=True), todo, park)
            return
        if parked is not None:
            await run_servers.stop(self, parked)
        meta = run_servers.new_meta(self, variant, version)
        server = await run_servers.start(self, variant, version, meta)
        if server is None:
            return  # failed to start: recorded and stopped
        self.metas[name] = meta.model_copy(deep=True)
        await self._measure_on(variant, server, meta, todo, park)

    async def _measure_on(self, variant: Variant, server: Server | ExistingServer, meta: VariantMeta,
                          todo: list[Phase], park: bool) -> None:
        name = variant.name
        up = False
        try:
            await self._measure(variant, server, meta, todo)
            meta.status = "ok"
            self.emit(ev.VariantDone(name, True))
            up = park
        except ServerFailed as exc:
            run_servers.failed(self, server, meta, exc)
        except asyncio.CancelledError:
            meta.status = "interrupted"  # --resume finishes it; its summary row must not read "running"
            raise
        finally:
            append_variant(self.run_dir, meta)
            self.metas[name] = meta.model_copy(deep=True)  # the next look's record keeps what this learnt
            if up:
                self.parked[name] = server  # in self.servers still: stopped at the end, however the run ends
            else:
                await run_servers.stop(self, server)

    async def _measure(self, variant: Variant, server: Server | ExistingServer, meta: VariantMeta,
                       todo: list[Phase]) -> None:
        from harness.bench.replay import warmup
        from harness.client.stream import ReplayClient

        run = self.plan.run
        model = await server.admin.model_id() or str(self.plan.model.path)
        client = ReplayClient(server.base_url + "/v1", model, endpoint=run.endpoint,
                              timeout_s=run.request_timeout_s, max_connections=max_connections(self.plan),
                              keepalive=run.connections == "keep-alive",
                              api_key=api_key(self.plan, variant) or "EMPTY")
        client = with_sampling(client, variant)  # the variant's sampling arm on every request (run.sampling)
        engine = server.engine
        version = meta.server_facts.get("server_version") or meta.engine_version  # what the server says it is
        probe = engine.spec_mode(run, as_served(variant, meta), version)
        meta.per_request_spec = probe
        try:
            if variant.name not in self.warmed:  # a parked server (the stopping rule's next look) is warm
                timing: dict[str, Any] = {}
                await warmup(client, self.plan, variant, timing)
                self.warmed.add(variant.name)
                one_off(self, variant.name, meta, timing)
            # a full collection stalls the event loop for tens of ms mid-stream: collect now, then keep the
            # long-lived objects out of later collections (vLLM's bench does the same)
            gc.collect()
            gc.freeze()
            for pid, suite, c, repeat, prompts in todo:
                await self._phase(variant, server, client, pid, suite, c, repeat, prompts, probe)
            await audit.after_measure(self, variant, client)  # untimed (harness.bench.audit)
        finally:
            await client.aclose()

    async def _phase(self, variant: Variant, server: Server | ExistingServer, client: ReplayClient, pid: str,
                     suite: Suite, c: int, repeat: int, prompts: list[Prompt], probe: str) -> None:
        from harness.bench.replay import probe_meta, replay_phase

        name = variant.name
        flushed = bool(await server.admin.flush_cache()) or not server.engine.accept_needs_flush
        if not flushed:  # the server's own counters then hold earlier traffic: reported, not ignored
            self.emit(ev.Alarm(name, "warning", "flush-failed",
                               f"{pid}: the cache flush before the phase failed; the server's accept length "
                               "and counters for this phase include earlier requests and are left out"))
        before = await server.admin.histograms()
        tries.start_attempt(self.attempts, self.done, name, pid, self.records, self.windows, self.outputs)
        self.phase_tag[name] = pid
        self.emit(ev.PhaseStarted(name, pid, suite.name, c, len(prompts)))
        tokens = 0
        ok = err = 0
        engine = server.engine
        extra = engine.spec_request_extra(probe)
        rate = self.phase_rate.get(pid)
        sizer = sizer_for(self, name, pid, suite, c, prompts) if rate is None else None
        t0 = time.perf_counter()
        replay = replay_phase(client, self.plan, prompts, suite, c, extra, watchdog=server.alive, sizer=sizer,
                              order_key=f"{self.plan.run.seed}/{pid}") if rate is None \
            else replay_rate_phase(client, self.plan, prompts, suite, rate, extra, pid)
        async with contextlib.aclosing(replay) as replayed:  # on an error its workers and watchdog stop here
            async for req, prompt, result in replayed:
                rec = make_record(run_id=self.run_id, variant=name, phase=pid, suite=suite.name,
                                  prompt_id=prompt.id, category=prompt.category, concurrency=c, repeat=repeat,
                                  request_id=req.request_id, result=result,
                                  normalise_spec=engine.request_spec, request_rate=rate)
                unauthorized(name, rec)
                append_record(self.records, rec)
                if self.outputs is not None and rec.ok:
                    self.outputs.append({"variant": name, "phase": pid, "request_id": req.request_id,
                                         "text": result.text, "reasoning": result.reasoning})
                tokens += (rec.output_tokens or 0) if rec.ok else 0
                ok, err = ok + rec.ok, err + (not rec.ok)
                self.request_errors += not rec.ok
                self.done_requests += 1
                self.emit(ev.RequestDone(rec, self.done_requests, self.total_requests))
        wall = time.perf_counter() - t0
        if not await server.alive():
            raise ServerFailed(name, "died during the suite", list(server.last_lines))
        mark = server.lines_seen
        server_side = engine.phase_server_means(before, await server.admin.histograms())
        info = await server.admin.server_info()
        # the phase's counter delta, where the engine has one
        accept = server_side.pop("server_accept_len", None)
        if accept is None:
            accept = engine.server_accept_len(info)
        await log_catch_up(server, mark)
        self.phase_tag[name] = None
        settle_total(self, sizer)
        passes = sizer.passes if sizer is not None else 1
        if sizer is not None and sizer.fixed_passes is None:
            self.pass_count[(name, suite.name, c)] = passes
        self.phases.append(PhaseRecord(
            variant=name, phase=pid, suite=suite.name, concurrency=c, repeat=repeat, requests=ok, errors=err,
            output_tokens=tokens, wall_s=round(wall, 6), server_accept_len=accept, flush_ok=flushed,
            last_gen_throughput=engine.last_gen_throughput(info), server=server_side, passes=passes).row())
        self.emit(ev.PhaseDone(name, pid, wall, accept, passes))
        where = (name, pid.split("#")[0])
        if probe == "meta_info" and where not in self.probed:  # greedy: every repeat and pass accepts alike
            self.probed.add(where)
            self.phase_tag[name] = f"probe:{pid}"
            await probe_meta(client, self.plan, prompts, suite, c, self.run_dir, name, pid,
                             engine.request_spec)
            self.phase_tag[name] = None
