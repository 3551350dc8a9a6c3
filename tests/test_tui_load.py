"""Request-rate load in the TUI (issue 18): a stand-in run with run.request_rate, opened in Results, shows the
speedup-vs-rate table and chart and the rate where speculation stops paying, as the CLI prints them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.load_report import rate_label, stops_paying
from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, reap_servers, sim_env, write_plan
from tests.snapshots.tui_fakes import wait_for
from tests.test_workloads_run import GOOD

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


async def _rate_run(tmp_path: Path) -> Path:
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.2), variants=[{"name": "baseline"}, GOOD],
                           suite_prompts=[{"id": "q1", "category": "chat", "text": "Tell me about tea."},
                                          {"id": "q2", "category": "code", "text": "Reverse a list."}],
                           run={"concurrency": [2], "max_tokens": 16, "repeats": 1,
                                "request_rate": [20, "inf"]})
    assert await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results")) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    return run_dir


@pytest.mark.slow
async def test_results_show_speedup_against_request_rate(tmp_path):
    run_dir = await _rate_run(tmp_path)
    rates = pd.read_csv(run_dir / "summary_by_rate.csv")
    app = build_app(None, tmp_path / "results", plan=load_plan(tmp_path / "plan.yaml"), section="results",
                    gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one("#runs-table").row_count == 1, "the run listed",
                       30)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.result is not None, "the run opened", 30)
        await pilot.pause()
        tabs = app.screen.query_one("#results-tabs")
        tabs.active = "tab-load"
        await pilot.pause()
        assert tabs.active == "tab-load"
        table = app.screen.query_one("#load-table")
        assert table.row_count == len(rates) == 4
        assert [table.get_cell(f"rate{i}", "request_rate") for i in range(4)] == ["20", "inf", "20", "inf"]
        assert {table.get_cell(f"rate{i}", "variant") for i in range(4)} == {"baseline", "eagle3"}
        note = str(app.screen.query_one("#load-note").render())
        assert stops_paying(rates)[0] in note and "eagle3: " in note
        chart = str(app.screen.query_one("#load-chart").render())
        # a bar per row whose TPOT speedup is defined; none for a row without one (seen in CI under load: at
        # inf/s all 16 tokens of each eagle3 request came in one network read, so TPOT 0.0 and no speedup)
        labels = {f"{r.variant} @{rate_label(float(r.request_rate))}/s": r.speedup == r.speedup
                  for r in rates.itertuples()}
        assert labels["eagle3 @20/s"] or labels["eagle3 @inf/s"], rates.to_string()
        for label, charted in labels.items():
            assert (label in chart) == charted, (label, chart)


def _fixture_run(root: Path, name: str, rates: list[dict] | None) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    pd.DataFrame([{"variant": "baseline", "concurrency": 1, "tok_s": 10.0, "status": "ok"},
                  {"variant": "eagle3", "concurrency": 1, "tok_s": 14.0, "status": "ok"}]).to_csv(
        run_dir / "summary.csv", index=False)
    if rates is not None:
        pd.DataFrame(rates).to_csv(run_dir / "summary_by_rate.csv", index=False)
    return run_dir


async def test_the_load_tab_says_where_speculation_stops_paying_and_hides_without_rates(tmp_path):
    rows = [{"variant": v, "request_rate": r, "requests": 8, "tok_s": 100.0, "speedup": s}
            for v, r, s in (("baseline", 1, None), ("baseline", 8, None), ("eagle3", 1, 1.4),
                            ("eagle3", 8, 0.9))]
    loaded = _fixture_run(tmp_path / "results", "20250101-000001-rates", rows)
    plain = _fixture_run(tmp_path / "results", "20250101-000000-plain", None)
    app = build_app(None, tmp_path / "results", section="results", gpu_poll_s=0)  # the demo plan
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(msg.OpenRunRequested(str(loaded)))
        await wait_for(pilot, lambda: app.result is not None and app.result.info.run_dir == str(loaded),
                       "opened", 30)
        await pilot.pause()
        tabs = app.screen.query_one("#results-tabs")
        assert tabs.get_tab("tab-load").display
        tabs.active = "tab-load"
        await pilot.pause()
        note = str(app.screen.query_one("#load-note").render())
        assert "eagle3: speculation stops paying at 8 req/s" in note
        chart = str(app.screen.query_one("#load-chart").render())
        assert "eagle3 @1/s" in chart and "eagle3 @8/s" in chart and "baseline" not in chart
        app.post_message(msg.OpenRunRequested(str(plain)))
        await wait_for(pilot, lambda: app.result.info.run_dir == str(plain), "the plain run opened", 30)
        await pilot.pause()
        assert not tabs.get_tab("tab-load").display and tabs.active == "tab-categories"
