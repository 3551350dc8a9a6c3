"""The App's results half: earlier runs, a run's tables, comparisons, CSV export and the drafter listing,
read through harness.analysis.summary (the CLI's numbers) on worker threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App
from textual.reactive import var

from harness.tui import messages as msg


class ResultsControl(App[int]):
    runs: var[tuple] = var(tuple)
    result: var[Any] = var(None)
    comparison: var[Any] = var(None)
    drafters: var[tuple] = var(tuple)

    # set by the App
    results_dir: Path
    drafter_dirs: list[Path] | None

    def action_refresh_runs(self) -> None:
        self._list_runs()

    @work(thread=True, group="results", exit_on_error=False)
    def _list_runs(self) -> None:
        from harness.analysis.runs import list_runs

        self.post_message(msg.RunsListed(tuple(list_runs(self.results_dir))))

    @on(msg.RunsListed)
    def _runs_listed(self, m: msg.RunsListed) -> None:
        self.runs = m.runs

    @on(msg.OpenRunRequested)
    def _open_run(self, m: msg.OpenRunRequested) -> None:
        self._load_run(m.run_dir)

    @work(thread=True, group="results", exit_on_error=False)
    def _load_run(self, run_dir: str) -> None:
        from harness.analysis.runs import load_run

        self.post_message(msg.ResultsLoaded(load_run(run_dir)))

    @on(msg.ResultsLoaded)
    def _results_loaded(self, m: msg.ResultsLoaded) -> None:
        self.result = m.result

    @on(msg.CompareRequested)
    def _compare_requested(self, m: msg.CompareRequested) -> None:
        self._compare(m.run_a, m.run_b)

    @work(thread=True, group="results", exit_on_error=False)
    def _compare(self, a: str, b: str) -> None:
        from harness.analysis.compare import compare_runs
        from harness.analysis.runs import load_run

        self.post_message(msg.ComparisonLoaded(compare_runs(load_run(a), load_run(b))))

    @on(msg.ComparisonLoaded)
    def _comparison_loaded(self, m: msg.ComparisonLoaded) -> None:
        self.comparison = m.comparison

    @on(msg.ExportRequested)
    def _export_requested(self, m: msg.ExportRequested) -> None:
        tables = {
            "summary": self.result.summary if self.result is not None else None,
            "categories": self.result.categories if self.result is not None else None,
            "compare": self.comparison.table if self.comparison is not None else None,
        }
        if tables.get(m.what) is not None:
            self._export(tables[m.what], m.path)

    @work(thread=True, group="results", exit_on_error=False)
    def _export(self, df: Any, path: str) -> None:
        from harness.analysis.runs import export_csv

        self.post_message(msg.Exported(str(Path(path).expanduser()), export_csv(df, path)))

    @on(msg.Exported)
    def _exported(self, m: msg.Exported) -> None:
        self.notify(f"exported {m.rows} rows to {m.path}")

    def action_refresh_drafters(self) -> None:
        if self.plan is not None:
            self._list_drafters(self.plan)

    @work(thread=True, group="drafters", exit_on_error=False)
    def _list_drafters(self, plan: Any) -> None:
        from harness.analysis.runs import drafter_dirs, list_drafters, list_runs
        from harness.inputs.config import user_dir

        dirs = self.drafter_dirs if self.drafter_dirs is not None else drafter_dirs(plan)
        mine = user_dir("drafters")  # where evaluated checkpoints are registered
        if mine.is_dir() and mine.resolve() not in [d.resolve() for d in dirs]:
            dirs = [*dirs, mine]
        found = list_drafters(dirs, list_runs(self.results_dir))
        self.post_message(msg.DraftersListed(tuple(found)))

    @on(msg.DraftersListed)
    def _drafters_listed(self, m: msg.DraftersListed) -> None:
        self.drafters = m.drafters
