"""`draftbench tune`: the fastest speculative config of one drafter on one node, in a handful of restarts.

One async generator of events, built on run_plan with derived plans (one variant per config):
  1. wide:      baseline + the longest chain (largest num_steps, topk 1) over the plan's suites; its
                per-request histograms predict the accept length of every shorter chain (tune_model).
  2. preflight: every grid config through run_checks; configs it rejects are never started.
  3. step cost: short decode-only phases (ignore_eos, every request of a level started together) per
                config, all in one run directory that grows by one variant per candidate (run_plan skips
                what is done); candidates in order of expected gain, each one's cost estimated first.
  4. verify:    the predicted best per concurrency joins the wide run's directory, so it is paired with
                the same baseline over the full suites (summary.csv gives speedup and its interval).
Every sub-run keeps its servers and the next one adopts those with its exact launch command
(harness.serve.adopt): the wide run's baseline and longest chain get their step-cost phases where they
stand, and a winner still up is verified without a restart; whatever the GPU has no room for is stopped
before the next start, and every server left is stopped when the tune ends, however it ends.
Files are the source of truth and tune_state.json the bookkeeping, so `--resume DIR` replays the same
decisions from disk and run_plan resumes each sub-run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis import crossover_data as cd
from harness.analysis import tune_data as td
from harness.analysis import tune_model as tm
from harness.analysis import tune_report as tr
from harness.analysis.rundir import new_run_dir, redact_plan, write_json
from harness.analysis.store import TUNE_STATE_FILE, TuneDecision, read_tune_state, write_tune_state
from harness.analysis.tune_model import Config
from harness.analysis.tune_outputs import write_all
from harness.common import events as ev
from harness.common.errors import InputError
from harness.engines import engine_of
from harness.serve.kept import kept_servers, stop_kept_servers
from harness.studies import tune_budget as tb
from harness.studies import tune_plans as tp
from harness.studies.tune_options import PLAN_FILE, TuneOptions, read_tune_plan  # noqa: F401 (read here too)
from harness.studies.tune_preflight import tune_preflight

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.serve.kept import KeptServer
    from harness.targets.base import Target

STATE_FILE = TUNE_STATE_FILE


async def tune(plan: Plan, options: TuneOptions | None = None, *, results_dir: str | Path = "results",
               resume_dir: str | Path | None = None, target: Target | None = None,
               clock: Callable[[], float] = time.monotonic) -> AsyncIterator[Any]:
    """Yields the sub-runs' events (harness.common.events) and the tune's own (TuneStage, TuneCandidate,
    TuneDone). Closing the generator stops every server (each sub-run's own cleanup)."""
    t = _Tune(plan, options or TuneOptions(), Path(results_dir), Path(resume_dir) if resume_dir else None,
              target, clock)
    async for e in t.main():
        yield e


class _Tune:
    def __init__(self, plan: Plan, opts: TuneOptions, results_dir: Path, resume: Path | None,
                 target: Target | None, clock: Callable[[], float]):
        self.plan, self.opts, self.target, self.clock = plan, opts, target, clock
        if resume is not None:
            self.dir = resume
        else:
            _, self.dir = new_run_dir(results_dir, f"tune-{plan.name}")
        if opts.auto:
            from harness.analysis.crossover import ladder

            top = opts.max_batch or int(plan.server.max_running_requests)
            self.conc = ladder(top) if not opts.concurrency else sorted(set(opts.concurrency))
        else:
            self.conc = list(opts.concurrency or plan.run.concurrency)
        # the wide run's levels: auto measures acceptance once (batch does not change what is accepted)
        self.wide_conc = self.conc[:1] if opts.auto else self.conc
        if not self.conc:
            raise InputError(str(plan.source_path or ""), None, "run.concurrency", "is empty (request-rate "
                             "phases only): tune measures closed-loop levels; give --concurrency, e.g. 1,8")
        self.tuned = self._tuned_variant()
        if self.tuned.num_steps and self.tuned.eagle_topk == 1:  # the plan's own config is on the grid
            opts.steps = sorted(set(opts.steps) | {int(self.tuned.num_steps)})
            opts.graphs = sorted(set(opts.graphs) | {bool(self.tuned.cuda_graph)}, reverse=True)
        self.grid = tm.build_grid(engine_of(plan, self.tuned), opts.steps, opts.topk, opts.draft_tokens,
                                  opts.graphs)
        self.wide = Config(max(opts.steps), 1, max(opts.steps) + 1, True in opts.graphs)
        self.state = read_tune_state(self.dir)  # a resumed tune's, else a fresh one
        self._spent_before = float(self.state.spent_s)
        self.step_source: dict[Config, str] = {}
        self.hists: dict[str, list[int]] = {}  # the wide run's per-request histograms by category
        self.hist: list[int] | None = None  # their sum: what every chain's prediction comes from
        self.answered = False
        self._t0 = clock()

    # ---------------------------------------------------------------------------------------- bookkeeping
    def spent(self) -> float:
        return self._spent_before + (self.clock() - self._t0)

    def save(self) -> None:
        self.state.spent_s = round(self.spent(), 3)
        write_tune_state(self.dir, self.state)

    def stage(self, name: str, message: str) -> ev.TuneStage:
        self.state.stage = name
        self.save()
        return ev.TuneStage(name, message, self.spent(), self.opts.budget_s)

    def _tuned_variant(self) -> Variant:
        specs = [v for v in self.plan.variants if v.is_speculative and v.drafter is not None]
        if self.opts.variant:
            specs = [v for v in specs if v.name == self.opts.variant]
        if not specs:
            raise InputError(str(self.plan.source_path or ""), None, "variants",
                             f"no speculative variant with a drafter named {self.opts.variant!r}"
                             if self.opts.variant else "no speculative variant with a drafter to tune")
        if self.plan.baseline_of(specs[0]) is not self.plan.baseline:  # run.sampling: tune measures one arm
            raise InputError(str(self.plan.source_path or ""), None, "--variant",
                             f"{specs[0].name!r} is at another sampling arm than "
                             f"{self.plan.baseline.name!r}: tune measures the first arm")
        return specs[0]

    # ---------------------------------------------------------------------------------------- derived plans
    def variant_dict(self, cfg: Config, name: str | None = None) -> dict[str, Any]:
        return tp.variant_dict(self.tuned, cfg, name)

    def derived(self, variants: list[dict[str, Any]], *, cost: bool, baseline_last: bool = False,
                budget_s: float | None = None, conc: list[int] | None = None,
                rates: list[float] | None = None, fixed_repeats: int | None = None) -> Plan:
        if conc is None:
            conc = self.conc if cost else self.wide_conc
        return tp.derived(self.plan, variants, conc, self.opts.cost_tokens, cost=cost,
                          baseline_last=baseline_last, source=self.plan.source_path or self.dir / PLAN_FILE,
                          budget_s=budget_s, rates=rates, fixed_repeats=fixed_repeats,
                          max_running=self.opts.max_batch if self.opts.auto else None)

    def cost_sources(self, level: int | None = None) -> set[str]:
        return tp.cost_sources(self.plan, self.conc, level, self.dir / "cost")

    def kept_here(self) -> list[KeptServer]:
        """What this tune's sub-runs kept (harness.serve.kept), oldest first."""
        return sorted(kept_servers(self.dir), key=lambda k: k.started_wall)

    async def sub_run(self, plan: Plan, sub: str) -> AsyncIterator[Any]:
        """run_plan into tune_dir/sub (resumed when it exists), keeping its servers and offered the ones
        kept so far; times each variant's stage (an adopted server's is not a start). A stage's time adds up
        over its servers and the tune's sessions, as spent_s does: a resumed stage's is what it took in all,
        not its last session's (a verification's estimated cost is the wide run's whole stage)."""
        from harness.bench.runner import run_plan

        d = self.dir / sub
        d.mkdir(parents=True, exist_ok=True)
        started: dict[str, float] = {}  # variant -> its server's start
        before: dict[str, float] = {}  # variant -> its stage's time before that server
        async with contextlib.aclosing(run_plan(plan, results_dir=self.dir, resume_dir=d, target=self.target,
                                                keep_servers=True, adopt=self.kept_here(),
                                                remote_id=f"{self.dir.name}/{sub}")) as events:
            async for e in events:
                if isinstance(e, ev.ServerState) and e.state in ("starting", "adopted"):
                    started[e.variant] = self.clock()
                    before[e.variant] = float(self.state.stage_s.get(f"{sub}/{e.variant}", 0.0))
                    if e.state == "adopted":
                        self.state.adopted = [*(self.state.adopted or []), f"{sub}/{e.variant}"]
                    else:
                        self.state.starts = int(self.state.starts) + 1
                elif isinstance(e, ev.VariantDone) and e.variant in started:
                    spent = self.clock() - started[e.variant]  # a parked server's: up to its latest look
                    self.state.stage_s[f"{sub}/{e.variant}"] = round(before[e.variant] + spent, 3)
                    if not e.ok:
                        self.state.failed[e.variant] = e.detail or "server failed"
                    self.save()
                yield e

    async def main(self) -> AsyncIterator[Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.dir / PLAN_FILE, {"plan": redact_plan(self.plan.resolved_dict()),
                                         "options": asdict(self.opts)})
        complete = False
        try:
            for line in tb.plan_words(self):  # what the budget buys, before any server starts
                yield self.stage("plan", line)
            yield self.stage("wide", f"wide run {self.wide.name} + baseline over the plan's suites")
            wide_plan = self.derived([self.variant_dict(self.wide, self.wide_name)], cost=False,
                                     budget_s=self.opts.budget_s - self.spent() - tb.cost_reserve(self))
            async for e in self.sub_run(wide_plan, "wide"):
                yield e
            self.hists = td.histograms_by_category(self.dir / "wide", self.wide_name)
            self.hist = tm.add_histograms(self.hists.values())
            if not tm.steps_of(self.hist):
                self.state.stop_reason = "failed"
                yield self.stage("wide", "no per-request histograms from the wide run: nothing to predict")
                return
            if self.opts.preflight and not self.state.preflight_done:
                yield self.stage("preflight", f"{len(self.grid)} configs through preflight")
                graphs = await tune_preflight(self, self.target)
                short = [f"{w}: a verification there cannot decide" for w in self.state.warnings or []]
                for w in [*short, *graphs]:  # said before the budget is spent, not after
                    yield self.stage("preflight", f"warning: {w}")
            async for e in self.search():
                yield e
            if self.opts.auto:  # the crossover: bisection, both sides verified, the mix, the load
                from harness.studies.tune_crossover import crossover_stage

                async for e in crossover_stage(self):
                    yield e
            else:
                async for e in self.verify():
                    yield e
            complete = self.state.stop_reason in ("confirmed", "grid-exhausted")
        finally:
            self.save()
            await self.stop_kept()
        yield self.stage("report", "tune.csv, speculation_profile.json, the answer")
        csv = self.report()
        yield ev.TuneDone(str(self.dir), complete, str(self.state.stop_reason), str(csv),
                          int(self.state.starts), len(self.grid), answered=bool(self.answered))

    async def stop_kept(self) -> None:
        try:  # never in place of the error that ended the tune; the servers stay listed as kept
            await stop_kept_servers(self.plan, self.target, self.kept_here(), by="tune")
        except Exception as exc:
            self.state.stop_failed = f"{type(exc).__name__}: {exc}"
            self.save()

    @property
    def wide_name(self) -> str:
        return f"wide-{self.wide.name}"

    def measured(self, fallback: bool = False) -> dict[Config, dict[int, float]]:
        """Step ms per config and concurrency: its step-cost phases (what the search goes by). `fallback`
        (the report): the longest chain's also from the wide run's own decode windows when the budget left
        it no step-cost phase, so a tune stopped by its budget still predicts every config."""
        out = {c: self._cost_steps(c.name) for c in self.grid}
        out = {c: v for c, v in out.items() if v}
        if fallback and self.wide not in out:
            wide = td.step_costs(self.dir / "wide", self.wide_name, self.conc)
            if wide:
                out[self.wide] = wide
                self.step_source[self.wide] = "the wide run's decode windows"
        return out

    def _cost_steps(self, variant: str) -> dict[int, float]:
        """Step ms per concurrency from the step-cost phases (auto: as its crossover reads them)."""
        if not self.opts.auto:
            return td.step_costs(self.dir / "cost", variant, self.conc)
        return cd.step_ms(self.dir, variant, self.conc)

    def base_step(self, fallback: bool = False) -> dict[int, float]:
        got = self._cost_steps(self.plan.baseline.name)
        if not fallback:
            return got
        wide = td.step_costs(self.dir / "wide", self.plan.baseline.name, self.conc)
        return {**wide, **got}  # the step-cost phases where measured, else the wide run's own windows

    def accept(self, cfg: Config) -> float | None:
        if cfg.eagle_topk == 1:
            return tm.predicted_accept_len(self.hist or [], cfg)
        got = td.measured_accept_len(self.dir / "cost", cfg.name)  # a tree: its own step-cost phases
        return max(got.values()) if got else tm.predicted_accept_len(self.hist or [], cfg)  # lower bound

    def expected(self, cfg: Config, measured: dict[Config, dict[int, float]], base: dict[int, float]
                 ) -> dict[int, float]:
        al = self.accept(cfg)
        out = {}
        for c in self.conc:
            step = measured.get(cfg, {}).get(c) or tm.prior_step_ms(cfg, c, measured) or base.get(c)
            if al is not None and step and base.get(c):
                out[c] = tm.predicted_speedup(al, step, base[c])
        return out

    def est_cost(self) -> float:
        return tb.est_cost(self)

    def verify_cost(self) -> float:
        return tb.verify_cost(self)

    async def search(self) -> AsyncIterator[Any]:
        if self.state.short is not None:  # a resumed tune's shortfall: this session's budget says anew
            self.state.short = None
        done = {c.name for c in self.grid} & set(td.variant_status(self.dir / "cost"))
        order = [c.name for c in self.grid if c.name in done]  # resumed: the same plan, in the same order
        v, graph = self.tuned, True in self.opts.graphs
        anchors = []  # the plan's own config (the comparison users asked about), then both ends of the chain
        if v.num_steps:
            ndt = v.num_steps + 1 if v.eagle_topk == 1 else v.num_draft_tokens
            anchors.append(Config(v.num_steps, v.eagle_topk, ndt, bool(v.cuda_graph)))
        anchors += [Config(max(self.opts.steps), 1, max(self.opts.steps) + 1, graph),
                    Config(min(self.opts.steps), 1, min(self.opts.steps) + 1, graph)]
        anchors = list(dict.fromkeys(a for a in anchors if a in self.grid))
        yield self.stage("step-cost", f"baseline + up to {len(self.grid)} configs; anchors "
                         f"{', '.join(a.name for a in anchors)}")
        wide_up = any(k.variant == self.wide_name for k in self.kept_here())
        # no start-up to pay, only its phases: what the wide run left them (tune_budget.cost_reserve)
        within = self.spent() + tb.cost_reserve(self) <= self.opts.budget_s
        if within and not self.base_step() and wide_up and self.wide.name not in done \
                and self.wide.name not in {*self.state.rejected, *self.state.failed}:
            # the wide run's own server is still up: its step-cost phases first, where it stands (the GPU may
            # have no room for it next to a baseline), then the baseline's, adopted too when it was kept
            order.insert(0, self.wide.name)
            self.state.decisions.append(TuneDecision(self.wide.name, round(self.spent(), 3), 0.0,
                                                     self.opts.budget_s, None, adopted=True))
            yield ev.TuneCandidate(self.wide.name, "measuring", None, 0.0, "the wide run's server, adopted")
            plan = self.derived([self.variant_dict(self.wide)], cost=True, baseline_last=True)
            async for e in self.sub_run(plan, "cost"):
                yield e
            failed = self.state.failed.get(self.wide.name)
            yield ev.TuneCandidate(self.wide.name, "failed" if failed is not None else "measured", None, 0.0,
                                   failed or "")
        while True:
            measured, base = self.measured(), self.base_step()
            skip = set(self.state.rejected) | set(self.state.failed) | {c.name for c in measured}
            todo = [c for c in self.grid if c.name not in skip]
            if not base:
                pick, gain = None, None  # the baseline's own step-cost phases come first
            elif any(a.name not in skip for a in anchors):
                pick = next(a for a in anchors if a.name not in skip)
                gain = max(self.expected(pick, measured, base).values(), default=None)
            else:
                best = {c: max((self.expected(m, measured, base).get(c, 0.0) for m in measured), default=0.0)
                        for c in self.conc}
                scored = []
                for cfg in todo:
                    exp = self.expected(cfg, measured, base)
                    lead = max((exp[c] / best[c] for c in exp if best.get(c)), default=float("inf"))
                    scored.append((lead, max(exp.values(), default=0.0), cfg))
                scored = [s for s in scored if s[0] > 1.0 + self.opts.margin]
                if not scored:
                    self.state.stop_reason = "confirmed" if todo else "grid-exhausted"
                    break
                _, gain, pick = max(scored, key=lambda s: (s[1], s[0]))
            cost = self.est_cost()
            # a verification is kept back for a config's step costs; the baseline's come before anything
            # else can be predicted, the wide config's own verification being the wide run itself
            reserve = self.verify_cost() if pick is not None else 0.0
            if self.spent() + cost + reserve > self.opts.budget_s:
                self.state.stop_reason = "budget"
                what = f"the step costs of {pick.name}" if pick else "the baseline's step costs"
                self.state.short = tb.shortfall(self, what, cost, reserve)
                if pick is not None:
                    yield ev.TuneCandidate(pick.name, "skipped", gain, cost, "budget")
                yield self.stage("step-cost", tr.shortfall_words(self.state.short, self.dir))
                break
            name = pick.name if pick else self.plan.baseline.name
            self.state.decisions.append(TuneDecision(name, round(self.spent(), 3), round(cost, 3),
                                                     self.opts.budget_s, gain))
            if name not in order:
                order.append(name)
            self.save()
            yield ev.TuneCandidate(name, "measuring", gain, cost)
            variants = [self.variant_dict(c) for c in self.grid if c.name in order
                        and c.name not in self.state.failed]
            async for e in self.sub_run(self.derived(variants, cost=True), "cost"):
                yield e
            status = "failed" if name in self.state.failed else "measured"
            yield ev.TuneCandidate(name, status, gain, cost, self.state.failed.get(name, ""))
            if not base and not self.base_step():
                self.state.stop_reason = "failed"
                return

    def winners(self) -> list[Config]:
        measured, base = self.measured(), self.base_step()
        picks: list[Config] = []
        for c in self.conc:
            ranked = sorted(measured, key=lambda m: -self.expected(m, measured, base).get(c, 0.0))
            picks += [m for m in ranked[: self.opts.verify_top]
                      if self.expected(m, measured, base).get(c, 0) > 0]
        return list(dict.fromkeys(picks))

    async def verify(self) -> AsyncIterator[Any]:
        names = [c for c in self.winners() if c != self.wide]
        self.state.winners = [c.name for c in self.winners()]
        yield self.stage("verify", f"full paired runs: {', '.join(self.state.winners) or 'none'}")
        status = td.variant_status(self.dir / "wide")
        verified: list[Config] = []
        for cfg in names:
            if status.get(cfg.name) == "ok":
                verified.append(cfg)
                continue
            if self.spent() + self.verify_cost() > self.opts.budget_s:
                self.state.stop_reason = "budget"
                yield ev.TuneCandidate(cfg.name, "skipped", None, self.verify_cost(), "budget: not verified")
                continue
            yield ev.TuneCandidate(cfg.name, "verifying", None, self.verify_cost())
            verified.append(cfg)
            variants = [self.variant_dict(self.wide, self.wide_name),
                        *(self.variant_dict(v) for v in verified)]
            async for e in self.sub_run(self.derived(variants, cost=False), "wide"):
                yield e
            yield ev.TuneCandidate(cfg.name, "verified" if cfg.name not in self.state.failed else "failed")

    def report(self) -> Path:
        if self.hist is None:
            return self.dir / "tune.csv"
        out, self.answered = write_all(self, self.measured(fallback=True), self.base_step(fallback=True),
                                       self.opts.auto)
        return out
