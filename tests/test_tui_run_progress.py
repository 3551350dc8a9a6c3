"""The Run tab: elapsed time and an ETA from measured phase durations, the verdicts so far by the summary's
own rule, and plots and numbers that belong to the current run only (never the Servers section's windows)."""

from __future__ import annotations

import shutil

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.feed import EventFeed
from harness.tui.state import ProgressModel, verdict_lines
from harness.tui.widgets.progress_panel import progress_lines
from tests.snapshots.tui_fakes import FAKE_RUN_ID, FakeRun, Recorder, record, wait_for, window
from tests.test_tui_app import SIZE, make_app


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _phase(model, variant, conc, tokens, clock, *, start_cost, wall):
    phase = f"s@c{conc}#r1"
    clock.now += start_cost
    model.observe(ev.PhaseStarted(variant, phase, "s", conc, 4))
    for i in range(4):
        r = record(variant, phase, i, tokens)
        r.t_send, r.t_end = 0.0, 2.0  # 4 x tokens over 2 s
        model.observe(ev.RequestDone(r, model.done + 1, model.total))
    clock.now += wall
    model.observe(ev.PhaseDone(variant, phase, wall, None))


def test_elapsed_and_eta_from_the_events():
    clock = Clock()
    m = ProgressModel(clock)
    m.observe(ev.RunStarted("r", "/r", "p", ("baseline", "fast", "slow"), 12, True))
    _phase(m, "baseline", 1, 64, clock, start_cost=8.0, wall=2.0)
    p = m.snapshot()
    assert p.elapsed_s(clock.now) == 10.0
    # 8 requests left at 2 s / 4 requests, plus 8 s of start-up for each of the 2 variants not started
    assert p.eta_s == 8 * 0.5 + 2 * 8.0
    assert p.eta_at(clock.now + 5) == p.eta_s - 5
    _phase(m, "fast", 1, 128, clock, start_cost=8.0, wall=2.0)
    _phase(m, "slow", 1, 32, clock, start_cost=8.0, wall=2.0)
    p = m.snapshot()
    assert p.eta_s == 0.0
    assert "elapsed 0m30s   ETA 0m00s" in progress_lines(p, clock.now)


def test_a_sized_phase_counts_every_pass_and_a_new_run_counts_from_zero():
    m = ProgressModel(Clock())
    m.observe(ev.RunStarted("r", "/r", "p", ("baseline",), 5, True))
    m.observe(ev.PhaseStarted("baseline", "s@c4#r1", "s", 4, 5))
    assert m.snapshot().phase_total == 5
    m.observe(ev.PhaseSized("baseline", "s@c4#r1", 4, 5, 1.2, 6, 7.0, False))
    assert m.snapshot().phase_total == 30  # 6 passes over 5 prompts, not "30/5 in this phase"
    for i in range(30):
        m.observe(ev.RequestDone(record("baseline", "s@c4#r1", i), i + 1, 30))
    m.observe(ev.PhaseDone("baseline", "s@c4#r1", 3.0, None, 6))
    m.observe(ev.PhaseStarted("baseline", "s@c4#r2", "s", 4, 5))  # a later repeat replays as many passes
    assert m.snapshot().phase_total == 30
    for i in range(31):  # ... or more, when it ran faster than the first: one more pass of 5
        m.observe(ev.RequestDone(record("baseline", "s@c4#r2", i), 31 + i, 61))
    assert (m.snapshot().phase_done, m.snapshot().phase_total) == (31, 35)  # never "31 of 30"
    m.observe(ev.PhaseDone("baseline", "s@c4#r2", 2.0, None, 7))
    m.observe(ev.PhaseStarted("baseline", "s@c4#r3", "s", 4, 5))  # the first repeat's count still sets it
    assert m.snapshot().phase_total == 30
    m.observe(ev.RunStarted("r2", "/r2", "p", ("baseline",), 16, True))  # a tune's next run
    p = m.snapshot()
    assert (p.done, p.total, p.phase, p.phase_done) == (0, 16, None, 0)  # was "requests 30 of 16"
    late = ProgressModel(Clock())
    late.observe(ev.RunStarted("r", "/r", "p", ("baseline",), 16, True))
    late.observe(ev.RequestDone(record("baseline", "x", 0), 20, 16))  # a total the run has not caught up with
    assert "requests 20 of 20" in progress_lines(late.snapshot())


def test_verdict_lines_say_what_the_summary_says():
    rows = [
        {"variant": "baseline", "concurrency": 1, "baseline": True, "speedup": 1.0, "verdict": "baseline"},
        {"variant": "eagle", "concurrency": 1, "baseline": False, "speedup": 1.724, "verdict": "faster",
         "speedup_ci_low": 1.533, "speedup_ci_high": 1.939, "ci_level": 0.995, "decide_look": "1/3"},
        {"variant": "eagle", "concurrency": 4, "baseline": False, "speedup": 1.6, "verdict": "undecided",
         "speedup_ci_low": 0.9, "speedup_ci_high": 2.2, "ci_level": 0.95, "decide_look": None},
        {"variant": "weak", "concurrency": 1, "baseline": False, "speedup": 0.61, "verdict": "too-short",
         "speedup_ci_low": float("nan"), "speedup_ci_high": float("nan"), "ci_level": None},
        {"variant": "broken", "concurrency": 1, "baseline": False, "speedup": None, "verdict": None},
    ]
    assert verdict_lines(rows) == {
        "eagle": "c1 faster 1.72x (99.5% CI 1.53-1.94, look 1/3); c4 undecided 1.60x (95% CI 0.90-2.20)",
        "weak": "c1 too-short 0.61x",
    }
    assert set(verdict_lines(rows, ["weak"])) == {"weak"}


def test_the_servers_sections_windows_never_reach_the_run_tab():
    posted = []
    feed = EventFeed(posted.append, source="fleet")
    feed.push(ev.LogWindow("baseline", window(2.0, 100.0), None))
    feed.flush()
    assert not [m for m in posted if isinstance(m, msg.ProgressUpdated)]
    run = EventFeed(posted.append, source="run")
    run.push(ev.LogWindow("baseline", window(2.0, 100.0), None))
    run.flush()
    assert [type(m).__name__ for m in posted] == ["ProgressUpdated"]


async def test_the_run_tab_shows_elapsed_eta_and_verdicts(tmp_path):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done", "run done")
        p = app.progress
        assert p.started_at is not None
        numbers = str(app.screen.query_one("#run-numbers").render())
        assert "elapsed" in numbers and "ETA" in numbers
        # a first run's verdicts (tests/test_tui_verdicts.py)
        app.run_verdicts = {"good-eagle3": "c1 faster 1.90x"}
        # a second run starts from nothing: no series or verdicts of the first
        assert app.progress.accept_series
        shutil.rmtree(tmp_path / "results" / FAKE_RUN_ID)  # the fake writes the same run directory again
        fake2 = FakeRun(block=True)
        app.run_events = fake2
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: fake2.waiting.is_set(), "second run going")
        assert app.run_verdicts == {} and app.progress.accept_series == {}
        await pilot.press("ctrl+g", "y")
        await wait_for(pilot, lambda: app.run_state == "cancelled", "cancelled")
