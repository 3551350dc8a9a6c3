"""Issue 27, point 9, the live half, at 80x24 and 160x45: the status line follows the running variant, the
live verdict is the summary's own rule (a real run on the stand-in, with the stopping rule and without), the
Tune view's budget counts from the start and never reads "requests 20 of 16", CSV export goes to the run's
directory, and the Retrain drafters refresh after a run."""

from __future__ import annotations

import shutil

import pytest

from harness.analysis.runs import narrow_plan
from harness.analysis.summary import load_summary
from harness.bench.runner import run_plan
from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.dialogs import ExportDialog
from harness.tui.state import ProgressModel, RunChoice, verdict_lines
from tests.snapshots.tui_fakes import FAKE_RUN_ID, RESULTS, FakeRun, Recorder, record, screen_text, wait_for
from tests.test_tui_app import make_app
from tests.test_tui_fleet import demo_plan

SIZES = [(80, 24), (160, 45)]


@pytest.fixture(params=SIZES, ids=["80x24", "160x45"])
def size(request):
    return request.param


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_status_line_follows_the_running_variant(tmp_path, size):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    said: list[str] = []
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.watch(app, "run_status", lambda text: said.append(text))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done", "run done")
    # between one variant's phases and the next's, the line names the server being started, then its phases
    for variant in ("baseline", "good-eagle3", "weak-eagle3"):
        start = said.index(f"running: starting {variant}'s server")
        assert said[start + 1] == f"running: {variant}'s server is ready: warming up"
        assert said[start + 2].startswith(f"running: {variant} snap-suite@c1#r1")
    # from a variant's server start to the next one's, every line names that variant
    starts = [said.index(f"running: starting {v}'s server") for v in ("good-eagle3", "weak-eagle3")]
    assert all("good-eagle3" in line for line in said[starts[0]:starts[1]])
    assert "running: baseline snap-long@c4#r1 (1 request at concurrency 4)" in said[:starts[0]]


async def test_the_status_line_is_on_screen_whole(tmp_path, size):
    fake = FakeRun(block=True)
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: fake.waiting.is_set(), "the first phase going")
        await wait_for(pilot, lambda: "baseline snap-suite@c1#r1" in app.run_status, "the phase named")
        status = app.screen.query_one("#run-status")
        await pilot.pause()
        shown = " ".join(ln.strip()
                         for ln in screen_text(app).splitlines()[status.region.y:status.region.bottom])
        assert "running: baseline" in shown and "snap-suite@c1#r1" in shown  # wrapped at 80, never cut
        await pilot.press("ctrl+g", "y")
        await wait_for(pilot, lambda: app.run_state == "cancelled", "cancelled")


@pytest.mark.parametrize(("stop", "size"), [("decided", (160, 45)), ("fixed", (80, 24))])
async def test_the_live_verdict_is_the_final_rule(tmp_path, stop, size):
    """A real run on the stand-in: each variant's verdicts while the run goes are the summary's, and at the
    end they are the final table's (before: `faster 1.63x@c4` live from a ratio of live tok/s, `within-noise`
    at the end)."""
    plan = demo_plan(tmp_path)
    plan.run.stop, plan.run.max_repeats, plan.run.min_steady_s = stop, 3, 0.05
    plan = narrow_plan(plan,
                       RunChoice(("smoke",), ("baseline", "good-eagle3", "seed-weak-eagle3"), (1, 4), 32))
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, run_events=run_plan,
                    section="run", gpu_poll_s=0)
    rec = Recorder()
    async with app.run_test(size=size, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done" and app.result is not None, "the run done", 120)
        final = verdict_lines(load_summary(app.run_dir).to_dict("records"))
        assert set(final) == {"good-eagle3", "seed-weak-eagle3"}
        await wait_for(pilot, lambda: app.run_verdicts == final, "the live verdicts settled")
        numbers = str(app.screen.query_one("#run-numbers").render())
        for variant, words in final.items():
            assert f"{variant}: {words}" in numbers
        app.clear_notifications()
        app.screen.query_one("#run-live").focus()  # the live pane scrolls (at 80x24 the verdicts are below)
        await pilot.press("end")
        await pilot.pause()
        assert "seed-weak-eagle3: c1" in screen_text(app)
    looks = [m for m in rec.of(msg.RunNote) if m.look]
    updates = rec.of(msg.VerdictsUpdated)
    if stop == "decided":  # judged at each look of the stopping rule, not as variants finish
        assert looks and len(updates) == len(looks)
        assert all("look " in words for u in updates for words in u.verdicts.values())
    else:  # a fixed design: each speculative variant judged once it finished, the baseline never
        assert not looks and [set(u.verdicts) for u in updates] == [{"good-eagle3"}, {"seed-weak-eagle3"}]


async def test_the_tune_budget_counts_from_the_start(tmp_path, size):
    clock = Clock()
    app, _ = make_app(tmp_path, section="tune", clock=clock)
    budget = lambda: next(ln  # noqa: E731
                          for ln in str(app.screen.query_one("#tune-progress").render()).splitlines()
                          if ln.startswith("budget"))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        # the tune's process is not started: its events are posted below
        app.tune_control._tune = lambda proc: None
        assert budget() == "budget: -"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.tune_state == "preparing", "the tune starting")
        clock.now += 30.0  # the first stage's word comes after the budget plan and a server start
        await wait_for(pilot, lambda: budget().startswith("budget: 30 s spent of 7200 s"),
                       "the clock counting")
        app.post_message(msg.TuneStaged("wide", "wide run", 31.0, 7200.0))
        await wait_for(pilot, lambda: budget().startswith("budget: 31 s spent"), "the stage's own count")
        clock.now += 12.0
        await wait_for(pilot, lambda: budget().startswith("budget: 43 s spent of 7200 s, 7157 s left"),
                       "and on from there")
        model = ProgressModel(clock)  # the tune's sub-runs as TuneFeed folds them: a new run counts from zero
        model.observe(ev.RunStarted("w", "/w", "p", ("baseline",), 20, True))
        for i in range(20):
            model.observe(ev.RequestDone(record("baseline", "s@c1#r1", i), i + 1, 20))
        model.observe(ev.RunStarted("c", "/c", "p", ("baseline",), 16, True))
        app.post_message(msg.TuneProgressed(model.snapshot()))
        progress = lambda: str(app.screen.query_one("#tune-progress").render())  # noqa: E731
        await wait_for(pilot, lambda: "requests 0 of 16" in progress(), "the next run's count")
        assert "requests 20 of 16" not in progress()
        app.tune_state = "cancelled"


async def test_csv_export_goes_to_the_runs_directory(tmp_path, size):
    shutil.copytree(RESULTS, tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    rec = Recorder()
    async with app.run_test(size=size, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        run_dir = app.result.info.run_dir
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), "the export dialog")
        path = app.screen.query_one("#export-path").value
        assert path.startswith(run_dir + "/") and path.endswith(".csv")
        await pilot.press("enter")
        await wait_for(pilot, lambda: rec.of(msg.Exported), "exported")
        await pilot.press("E")  # the Categories tab's table: the same directory
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), "the categories dialog")
        assert app.screen.query_one("#export-path").value.startswith(run_dir + "/")
        await pilot.press("escape")
    assert (tmp_path / "results" / run_dir.rsplit("/", 1)[-1] / path.rsplit("/", 1)[-1]).exists()


async def test_the_retrain_drafters_refresh_after_a_run(tmp_path, size):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="retrain")
    rec = Recorder()
    async with app.run_test(size=size, message_hook=rec) as pilot:
        table = app.screen.query_one("#drafters-table")
        await wait_for(pilot, lambda: "snap-good-eagle3" in [k.value for k in table.rows], "drafters listed")
        assert table.get_cell("snap-good-eagle3", "runs") == "0"  # no run in this results directory yet
        listed = len(rec.of(msg.DraftersListed))
        await pilot.press("2", "ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done", "run done")
        await pilot.press("4")
        # no `u` pressed: the run that just finished is among the drafter's runs
        await wait_for(pilot, lambda: table.get_cell("snap-good-eagle3", "runs") == "1",
                       "the drafter's new run")
        assert len(rec.of(msg.DraftersListed)) > listed
        assert FAKE_RUN_ID in [r[0] for d in app.drafters if d.name == "snap-good-eagle3" for r in d.results]
