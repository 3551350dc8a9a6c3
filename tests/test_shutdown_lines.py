"""SGLang's `Subprocess scheduler_0 ... crashed with exit code -15` after draftbench's own SIGTERM is its
normal shutdown: marked as such in the lines the log pane shows and in the CLI's `server stopped`, never
before we stopped it (then it is a real crash), and the log file keeps SGLang's own words."""

from __future__ import annotations

from pathlib import Path

from harness.bench.runner import run_plan
from harness.cli.demo import load_ready_plan
from harness.common import events as ev
from harness.engines import get_engine
from harness.serve.server import STOP_NOTE, label_stop_lines
from tests.cli_helpers import cli_here, small_plan

CAPTURES = Path(__file__).resolve().parent / "fixtures" / "sglang-0.5.15.post1"
SGLANG = get_engine("sglang")


def test_exactly_the_crash_looking_shutdown_lines_of_the_real_captures():
    hits = {}
    for log in sorted(CAPTURES.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if SGLANG.expected_on_stop(line):
                hits.setdefault(log.name, []).append(line.split("] ", 1)[1])
    assert hits == {
        "server-baseline.log": [
            "Subprocess scheduler_0 (pid=616) crashed with exit code -15. Triggering SIGQUIT for cleanup...",
            "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            "Sleeping 5 seconds before crash diagnostics to let GPU activity settle."],
        "server-eagle3.log": [
            "Subprocess detokenizer (pid=541) crashed with exit code -15. Triggering SIGQUIT for cleanup...",
            "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            "Sleeping 5 seconds before crash diagnostics to let GPU activity settle."],
    }
    assert not SGLANG.expected_on_stop("Subprocess scheduler_0 (pid=616) crashed with exit code -9.")
    assert get_engine("vllm").expected_on_stop(hits["server-baseline.log"][0]) is False


def test_marked_only_once_we_sent_the_term():
    crash = "[t] Subprocess scheduler_0 (pid=616) crashed with exit code -15. Triggering SIGQUIT for " \
        "cleanup..."
    assert label_stop_lines(SGLANG, [crash], stopping=False) == ([crash], 0)  # a crash we did not cause
    assert label_stop_lines(SGLANG, ["x", crash], stopping=True) == (["x", crash + STOP_NOTE], 1)


async def test_a_run_marks_its_servers_shutdown_lines(tmp_path):
    plan = load_ready_plan(small_plan(tmp_path, variants=("baseline",)), tmp_path / "r")
    logs, stopped = [], []
    async for e in run_plan(plan, results_dir=tmp_path / "r"):
        if isinstance(e, ev.ServerLog):
            logs += e.lines
        elif isinstance(e, ev.ServerState) and e.state == "stopped":
            stopped.append(e.detail)
    crash = [ln for ln in logs if "crashed with exit code -15" in ln]
    assert len(crash) == 1 and crash[0].endswith(STOP_NOTE)
    assert stopped == ["SGLang logged its usual 'Subprocess ... crashed with exit code -15' on our SIGTERM: "
                       "the expected shutdown, not a crash"]
    [log] = (tmp_path / "r").glob("*/logs/*")
    assert "crashed with exit code -15. Triggering SIGQUIT for cleanup...\n" in log.read_text()  # as written


def test_the_cli_says_the_stop_was_normal(tmp_path):
    plan = small_plan(tmp_path, variants=("baseline",))
    out = cli_here("run", str(plan), "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "[baseline] server stopped: SGLang logged its usual 'Subprocess ... crashed with exit code -15' " \
           "on our SIGTERM: the expected shutdown, not a crash" in out.stderr


async def test_the_servers_sections_log_lines_are_marked_too(tmp_path):
    """The TUI's log pane shows a Fleet's ServerLog lines: the same Server marks them."""
    from harness.serve.fleet import Fleet
    from tests.test_tui_fleet import Events, demo_plan

    events = Events()
    fleet = Fleet(demo_plan(tmp_path), on_event=events, results_dir=tmp_path / "results")
    try:
        assert (await fleet.start("baseline")).state == "ready"
        await fleet.stop("baseline")
    finally:
        await fleet.close()
    crash = [ln for ln in events.lines("baseline") if "crashed with exit code -15" in ln]
    assert len(crash) == 1 and crash[0].endswith(STOP_NOTE)


async def test_the_log_pane_shows_the_stop_as_a_stop(tmp_path):
    """The Servers section: start the baseline, stop it (x); its log pane's -15 line carries the note."""
    from harness.tui.app import build_app
    from harness.tui.widgets.log_pane import LogPane
    from tests.snapshots.tui_fakes import wait_for
    from tests.test_tui_fleet import demo_plan

    plan = demo_plan(tmp_path)
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, gpu_poll_s=0)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet is not None and app.servers, "plan")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready", 30)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "stopped", 30)
        pane = app.screen.query_one(LogPane)
        await wait_for(pilot, lambda: any("exit code -15" in ln for ln in pane.visible_lines("baseline")),
                       "the shutdown lines shown", 30)
        crash = [ln for ln in pane.visible_lines("baseline") if "exit code -15" in ln]
        assert crash and all(ln.endswith(STOP_NOTE) for ln in crash)
