"""The Run tab: elapsed time and an ETA from measured phase durations, a live verdict per finished variant,
and plots and numbers that belong to the current run only (never the Servers section's windows)."""

from __future__ import annotations

import shutil

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.feed import EventFeed
from harness.tui.state import ProgressModel, live_verdict
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


def test_elapsed_eta_and_live_verdicts_from_the_events():
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
    m.observe(ev.VariantDone("fast", True))
    _phase(m, "slow", 1, 32, clock, start_cost=8.0, wall=2.0)
    m.observe(ev.VariantDone("slow", True))
    p = m.snapshot()
    assert p.verdicts == {"fast": "faster 2.00x@c1", "slow": "slower 0.50x@c1"}
    assert p.eta_s == 0.0
    text = progress_lines(p, clock.now)
    assert "elapsed 0m30s   ETA 0m00s" in text and "done: fast faster 2.00x@c1" in text


def test_mixed_and_missing_baselines():
    assert live_verdict({1: 2.0, 4: 0.5}, {1: 1.0, 4: 1.0}) == "mixed 2.00x@c1 0.50x@c4"
    assert live_verdict({1: 2.0}, {}) == "no baseline to compare with"


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
        assert p.started_at is not None and set(p.verdicts) == {"good-eagle3", "weak-eagle3"}
        numbers = str(app.screen.query_one("#run-numbers").render())
        assert "elapsed" in numbers and "ETA" in numbers and "done: good-eagle3" in numbers
        # a second run starts from nothing: no series or verdicts of the first
        assert app.progress.accept_series
        shutil.rmtree(tmp_path / "results" / FAKE_RUN_ID)  # the fake writes the same run directory again
        fake2 = FakeRun(block=True)
        app.run_events = fake2
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: fake2.waiting.is_set(), "second run going")
        assert app.progress.verdicts == {} and app.progress.accept_series == {}
        await pilot.press("ctrl+g", "y")
        await wait_for(pilot, lambda: app.run_state == "cancelled", "cancelled")
