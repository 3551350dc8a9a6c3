"""An incomplete run says so: `draftbench summary` and the TUI's Results mark a run whose provenance.json
status is not complete and list what its plan asked for that has no rows (harness.analysis.completeness)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from harness.analysis.completeness import missing_parts
from harness.tui import messages as msg
from tests.cli_helpers import ROOT, cli_here
from tests.snapshots.tui_fakes import wait_for

SNAP = sorted((ROOT / "tests" / "snapshots" / "results").iterdir())[0]
BIND = "[Errno 98] error while attempting to bind on address ('127.0.0.1', 20994): address already in use"


def incomplete_run(results: Path, status: str = "incomplete") -> Path:
    """The snapshot run's records, with the files an interrupted run leaves: baseline measured both levels,
    good-eagle3 only concurrency 1, wrong-flag-eagle failed to start."""
    run = results / "20250101-120000-snap"
    shutil.copytree(SNAP, run)
    prov = json.loads((run / "provenance.json").read_text())
    (run / "provenance.json").write_text(json.dumps({**prov, "status": status}))
    (run / "plan.resolved.json").write_text(json.dumps({
        "variants": [{"name": n} for n in ("baseline", "good-eagle3", "wrong-flag-eagle")],
        "suites": [{"name": "smoke", "prompts": []}], "run": {"concurrency": [1, 4], "repeats": 1}}))
    header = "variant,phase,suite,concurrency,repeat,requests,errors,output_tokens,wall_s\n"
    rows = [f"{v},smoke@c{c}#r1,smoke,{c},1,5,0,640,4.0\n"
            for v, c in (("baseline", 1), ("baseline", 4), ("good-eagle3", 1))]
    (run / "phases.csv").write_text(header + "".join(rows))
    with open(run / "variants.jsonl", "a") as fh:
        fh.write(json.dumps({"variant": "wrong-flag-eagle", "status": "failed",
                             "failure": "exited before it became ready", "last_log_lines": [BIND]}) + "\n")
    return run


def test_what_an_incomplete_run_lacks(tmp_path):
    m = missing_parts(incomplete_run(tmp_path))
    assert m is not None and m.status == "incomplete"
    assert m.lines() == ["wrong-flag-eagle: no rows (port 20994 in use (exited before it became ready))",
                         "good-eagle3: no rows for smoke concurrency 4, repeat 1"]
    assert m.headline() == "INCOMPLETE run (provenance status: incomplete): 2 variant(s) lack rows"
    assert missing_parts(SNAP) is None  # complete: nothing to say


def test_summary_marks_it_first(tmp_path):
    run = incomplete_run(tmp_path, status="running")  # a run killed hard never set its status
    out = cli_here("summary", str(run), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["INCOMPLETE run (provenance status: running): 2 variant(s) lack rows",
                         "  wrong-flag-eagle: no rows (port 20994 in use (exited before it became ready))",
                         "  good-eagle3: no rows for smoke concurrency 4, repeat 1"]
    assert not cli_here("summary", str(SNAP), cwd=tmp_path).stdout.startswith("INCOMPLETE")


def test_summary_of_a_never_summarised_run_does_not_call_it_complete(tmp_path):
    run = incomplete_run(tmp_path, status="running")
    (run / "summary.csv").unlink()
    out = cli_here("summary", str(run), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads((run / "provenance.json").read_text())["status"] == "incomplete"
    assert out.stdout.startswith("INCOMPLETE run (provenance status: incomplete)")


@contextlib.asynccontextmanager
async def _results_open(tmp_path: Path):
    """The TUI on its Results section with the incomplete run open: (app, pilot)."""
    from tests.test_tui_app import make_app

    run = incomplete_run(tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    async with app.run_test(size=(160, 45)) as pilot:
        app.post_message(msg.OpenRunRequested(str(run)))
        await wait_for(pilot, lambda: app.result is not None, "opened", 30)
        await pilot.pause()
        yield app, pilot


async def test_the_tuis_results_mark_it(tmp_path):
    async with _results_open(tmp_path) as (app, _pilot):
        title = str(app.screen.query_one("#results-title").render())
        assert "INCOMPLETE run (provenance status: incomplete): 2 variant(s) lack rows" in title
        assert "good-eagle3: no rows for smoke concurrency 4, repeat 1" in " ".join(title.split())


async def test_a_result_arriving_as_the_pane_goes_away_is_dropped(tmp_path):
    # seen once under load: a run's result reached the Results pane while it was torn down, its tables still
    # there and its title already gone (NoMatches on #results-title)
    async with _results_open(tmp_path) as (app, _pilot):
        screen = app.screen
        rows = screen.query_one("#results-table").row_count
        await screen.query_one("#results-title").remove()
        screen._show_result(app.result)  # raised NoMatches before
        assert screen.query_one("#results-table").row_count == rows
