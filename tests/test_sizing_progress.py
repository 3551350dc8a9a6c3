"""The progress total of a sized phase never falls behind the requests done: the sizer starts a second pass
before it has planned when one pass is fewer than 2 x concurrency requests (5 prompts at c4), and that pass
counts as it starts (the TUI's Tune view read "requests 61 of 60" in a wide run's last phase)."""

from __future__ import annotations

from pathlib import Path

from harness.bench.run_phases import settle_total, sizer_for
from harness.common import events as ev
from harness.inputs.config import load_plan
from tests.faults_helpers import SIM_LAUNCHER, prompts, sim_env, write_plan


class _Run:
    """What sizer_for reads and writes of a run: its plan, the progress total, the passes of earlier
    repeats, and where events go."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self.total_requests = 5  # the plan's one pass of this phase, counted when the run started
        self.pass_count: dict = {}
        self.events: list = []

    def emit(self, e) -> None:
        self.events.append(e)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_pass_started_before_the_plan_counts_as_it_starts(tmp_path: Path):
    path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER, env=sim_env(),
                      variants=[{"name": "baseline"}], suite_prompts=prompts(5),
                      run={"concurrency": [4], "max_tokens": 8, "min_steady_s": 2.0, "phase_sizing": True})
    plan = load_plan(path)
    suite = plan.suites[0]
    run = _Run(plan)
    sizer = sizer_for(run, "baseline", "p@c4#r1", suite, 4, list(suite.prompts))
    clock = _Clock()
    sizer.clock = clock
    sizer.start()
    clock.now = 0.25  # pass 1 sent: 5 requests, fewer than 2 x 4, so no plan yet, but a second pass starts
    assert sizer.another() and not [e for e in run.events if isinstance(e, ev.PhaseSized)]
    assert run.total_requests == 10  # counted as it starts: its requests may finish before any plan
    clock.now = 0.5  # pass 2 sent: 10 >= 8, the plan: ~2.4 s of steady state at 0.25 s a pass
    assert sizer.another()
    [sized] = [e for e in run.events if isinstance(e, ev.PhaseSized)]
    assert run.total_requests == 5 * sized.passes
    while sizer.another():
        clock.now += 0.25
        assert run.total_requests >= 5 * sizer.passes
    settle_total(run, sizer)
    assert run.total_requests == 5 * sizer.passes  # exactly what it ran
