"""The retrain loop's evaluate stage: the gate's own stopping rule. Looks fixed in advance, each a run of the
evaluation plan (harness.retrain.loop_eval) in the one evaluation run directory, resumed look after look;
a concurrency stops once its candidate-against-current verdict is decided. The servers stay up between the
looks (a server the plan's own runs kept is adopted) and stop when the stage ends. A stage of the loop
(harness.retrain.loop's `_Loop`), kept apart so the loop stays one seam."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.common.errors import HarnessError
from harness.retrain import loop_eval as le
from harness.retrain.dataset import read_manifest
from harness.retrain.loop_state import save_record

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.retrain.loop_state import LoopRecord, RetrainSettings
    from harness.targets.base import Target


class EvaluatingLoop(Protocol):
    """What the evaluate stage reads and changes of the loop (harness.retrain.loop's `_Loop`)."""

    plan: Plan
    variant: str
    rec: LoopRecord  # the loop's state.json: the looks done, the evaluation run
    s: RetrainSettings
    results_dir: Path
    target: Target

    def step(self, stage: str, state: str, text: str, lines: tuple[str, ...] = ()) -> object: ...

    def finish(self, stage: str) -> None: ...


async def evaluate(loop: EvaluatingLoop) -> AsyncIterator[Any]:
    """Looks fixed in advance (harness.analysis.sequential: the first repeats, doubling, the plan's
    run.max_repeats), each judged at its Haybittle-Peto level: a concurrency whose
    candidate-against-current verdict is decided (or too short for more repeats to help) stops; the others
    get the next look's
    repeats, in the same run directory (run_plan resumes it: done phases are not run again)."""
    from harness.analysis.sequential import look_level, look_schedule
    from harness.analysis.verdicts import DECIDED
    from harness.retrain.gate import judge

    concs = [int(c) for c in loop.plan.run.concurrency]
    first = le.first_repeats(loop.plan, loop.s)
    schedule = look_schedule(first, max(first, int(loop.plan.run.max_repeats)))
    manifest = read_manifest(str(loop.rec.manifest))
    for look, repeats in enumerate(schedule, start=1):
        open_concs = [c for c in concs if str(c) not in loop.rec.looks]
        if not open_concs:
            break
        if look <= loop.rec.look_done:
            continue
        bench = le.eval_plan(loop.plan, loop.variant, loop.rec, str(loop.rec.source_run), manifest,
                             repeats=repeats, concurrency=open_concs)
        async with contextlib.aclosing(_measure(loop, bench, look, len(schedule))) as events:
            async for e in events:
                yield e
        level = look_level(look, len(schedule))
        stamp = {"look": look, "looks": len(schedule), "level": round(level, 6), "repeats": repeats}
        result = judge(str(loop.rec.eval_run), str(loop.rec.candidate), loop.variant, open_concs,
                       loop.s.rule, looks=dict.fromkeys(open_concs, stamp))
        last = look == len(schedule)
        for row in result.rows:
            if last or row.verdict in (*DECIDED, "too-short", "missing"):
                loop.rec.looks[str(row.concurrency)] = stamp
        loop.rec.look_done = look
        save_record(loop.rec, loop.results_dir)
        still = [c for c in open_concs if str(c) not in loop.rec.looks]
        yield loop.step("evaluate", "progress",
                        f"gate look {look}/{len(schedule)} after {repeats} repeats "
                        f"({100 * level:.1f}% intervals): " + "; ".join(
                            f"c{r.concurrency} {r.verdict}" for r in result.rows)
                        + (f"; c{', c'.join(map(str, still))} get more repeats" if still else ""))
    await _stop_kept(loop)
    loop.finish("evaluate")
    yield loop.step("evaluate", "done", f"evaluation run {loop.rec.eval_run} complete")


async def _stop_kept(loop: EvaluatingLoop) -> None:
    """The servers the evaluation kept between its looks (and adopted from the plan's runs) stop here."""
    from harness.serve.kept import kept_servers, stop_kept_servers

    if not loop.rec.eval_run:
        return
    here = Path(loop.rec.eval_run).resolve()
    mine = [k for k in kept_servers(loop.results_dir, loop.plan.name + le.EVAL_SUFFIX)
            if k.jsonl is not None and k.jsonl.parent.resolve() == here]
    await stop_kept_servers(loop.plan, loop.target, mine, by="retrain")


async def _measure(loop: EvaluatingLoop, bench: Plan, look: int, looks: int) -> AsyncIterator[Any]:
    from harness.bench.gate import require_preflight
    from harness.bench.runner import run_plan
    from harness.common import events as ev

    resume = loop.rec.eval_run
    yield loop.step("evaluate", "started",
                    f"look {look}/{looks}: {', '.join(v.name for v in bench.variants)} "
                    f"at c{', c'.join(str(c) for c in bench.run.concurrency)}, {bench.run.repeats} "
                    f"repeats, {sum(len(s.prompts) for s in bench.suites)} held-out prompts"
                    + (f" (in {resume})" if resume else ""))
    await require_preflight(bench, target=loop.target, resume_dir=resume)
    done = None
    from harness.serve.kept import kept_servers

    # servers stay up between the looks, and a server the plan's own runs kept (run --keep-servers) with
    # the launch command a variant here would start is taken over instead of started again
    offered = [*kept_servers(loop.results_dir, loop.plan.name),
               *kept_servers(loop.results_dir, bench.name)]
    events = run_plan(bench, results_dir=loop.results_dir, target=loop.target, resume_dir=resume,
                      keep_servers=True, adopt=offered)
    async with contextlib.aclosing(events):  # closing us stops its servers
        async for e in events:
            if isinstance(e, ev.RunStarted) and loop.rec.eval_run != e.run_dir:
                loop.rec.eval_run = e.run_dir
                save_record(loop.rec, loop.results_dir)
            if isinstance(e, ev.RunDone):
                done = e
            yield e
    if done is None or not done.complete:
        raise HarnessError(f"the evaluation run {loop.rec.eval_run} did not complete: run the same "
                           "command again to resume it")
