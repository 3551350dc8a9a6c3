"""The Results section's Context tab: accept length per context-length bucket as the CLI prints it, shown for
a run with summary_by_context.csv and hidden for one without."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.by_context_report import context_grid
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.snapshots.tui_fakes import wait_for

SIZE = (120, 40)


def _run(root: Path, name: str, contexts: list[dict] | None) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    pd.DataFrame([{"variant": "baseline", "concurrency": 1, "tok_s": 10.0, "status": "ok"},
                  {"variant": "eagle3", "concurrency": 1, "tok_s": 14.0, "status": "ok"}]).to_csv(
        run_dir / "summary.csv", index=False)
    if contexts is not None:
        pd.DataFrame(contexts).to_csv(run_dir / "summary_by_context.csv", index=False)
    return run_dir


def _row(bucket: str, lo: float, al: float, steps: float) -> dict:
    return {"variant": "eagle3", "sampling": "t0", "concurrency": 1, "category": "all", "axis": "context",
            "bucket": bucket, "lo": lo, "hi": lo * 4 or 1024, "requests": 3, "verify_steps": steps,
            "tokens": al * steps, "accept_len": al, "context_mean": lo + 10, "per_step_share": 1.0}


async def test_the_context_tab_shows_the_cli_grid_and_hides_without_it(tmp_path):
    rows = [_row("0-1k", 0, 3.1, 120), _row("16k-64k", 16384, 1.7, 12)]
    loaded = _run(tmp_path / "results", "20250101-000001-ctx", rows)
    plain = _run(tmp_path / "results", "20250101-000000-plain", None)
    app = build_app(None, tmp_path / "results", section="results", gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(msg.OpenRunRequested(str(loaded)))
        await wait_for(pilot, lambda: app.result is not None and app.result.info.run_dir == str(loaded),
                       "opened", 30)
        await pilot.pause()
        tabs = app.screen.query_one("#results-tabs")
        assert tabs.get_tab("tab-context").display
        tabs.active = "tab-context"
        await pilot.pause()
        table = app.screen.query_one("#context-table")
        headers, cells = context_grid(pd.DataFrame(rows), "context")
        assert [str(c.label) for c in table.columns.values()] == headers \
            == ["variant", "conc", "0-1k", "16k-64k"]
        assert [str(v) for v in table.get_row("ctx0")] == cells[0] == ["eagle3", "1", "3.10", "1.70?"]
        assert "fewer than 30 verify steps" in str(app.screen.query_one("#context-note").render())
        app.post_message(msg.OpenRunRequested(str(plain)))
        await wait_for(pilot, lambda: app.result.info.run_dir == str(plain), "the plain run opened", 30)
        await pilot.pause()
        assert not tabs.get_tab("tab-context").display and tabs.active == "tab-categories"
