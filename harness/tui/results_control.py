"""The App's results half: earlier runs, a run's tables, comparisons, CSV export and the drafter listing,
read through harness.analysis.summary (the CLI's numbers) on worker threads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.compare import compare_runs
from harness.analysis.runs import drafter_dirs, export_csv, list_drafters, list_runs, load_run
from harness.inputs.config import Plan, user_dir
from harness.tui import messages as msg
from harness.tui.half import Half, handles, work

if TYPE_CHECKING:
    import pandas as pd


class ResultsControl(Half):
    def refresh_runs(self) -> None:
        self._list_runs()

    @work(thread=True, group="results")
    def _list_runs(self) -> None:
        self.app.post_message(msg.RunsListed(tuple(list_runs(self.app.results_dir))))

    @handles(msg.RunsListed)
    def _runs_listed(self, m: msg.RunsListed) -> None:
        self.app.runs = m.runs

    @handles(msg.OpenRunRequested)
    def _open_requested(self, m: msg.OpenRunRequested) -> None:
        self.open_run(m.run_dir)

    @work(thread=True, group="results")
    def open_run(self, run_dir: str) -> None:
        """The run's tables into the Results section (the App's `result`)."""
        self.app.post_message(msg.ResultsLoaded(load_run(run_dir)))

    @handles(msg.ResultsLoaded)
    def _results_loaded(self, m: msg.ResultsLoaded) -> None:
        self.app.result = m.result

    @handles(msg.CompareRequested)
    def _compare_requested(self, m: msg.CompareRequested) -> None:
        self._compare(m.run_a, m.run_b)

    @work(thread=True, group="results")
    def _compare(self, a: str, b: str) -> None:
        self.app.post_message(msg.ComparisonLoaded(compare_runs(load_run(a), load_run(b))))

    @handles(msg.ComparisonLoaded)
    def _comparison_loaded(self, m: msg.ComparisonLoaded) -> None:
        self.app.comparison = m.comparison

    @handles(msg.ExportRequested)
    def _export_requested(self, m: msg.ExportRequested) -> None:
        result, comparison = self.app.result, self.app.comparison
        tables = {
            "summary": result.summary if result is not None else None,
            "categories": result.categories if result is not None else None,
            "compare": comparison.table if comparison is not None else None,
        }
        if tables.get(m.what) is not None:
            self._export(tables[m.what], m.path)

    @work(thread=True, group="results")
    def _export(self, df: pd.DataFrame, path: str) -> None:
        self.app.post_message(msg.Exported(str(Path(path).expanduser()), export_csv(df, path)))

    @handles(msg.Exported)
    def _exported(self, m: msg.Exported) -> None:
        self.app.notify(f"exported {m.rows} rows to {m.path}")

    def refresh_drafters(self) -> None:
        if self.app.plan is not None:
            self._list_drafters(self.app.plan)

    @work(thread=True, group="drafters")
    def _list_drafters(self, plan: Plan) -> None:
        given = self.app.drafter_dirs
        dirs = given if given is not None else drafter_dirs(plan)
        mine = user_dir("drafters")  # where evaluated checkpoints are registered
        if mine.is_dir() and mine.resolve() not in [d.resolve() for d in dirs]:
            dirs = [*dirs, mine]
        found = list_drafters(dirs, list_runs(self.app.results_dir))
        self.app.post_message(msg.DraftersListed(tuple(found)))

    @handles(msg.DraftersListed)
    def _drafters_listed(self, m: msg.DraftersListed) -> None:
        self.app.drafters = m.drafters
