"""Results: the side-by-side table from summary.csv (winner highlighted, slower-than-baseline marked),
per-category drill-down, a tok/s bar chart, earlier runs, a comparison of two runs, CSV export."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from harness.analysis.by_context_report import FEW_STEPS, TITLES, context_grid
from harness.analysis.columns import fmt_cell
from harness.analysis.compare import Comparison, comparison_rows
from harness.analysis.engines_table import engines_of, stand_ins
from harness.analysis.load_report import RATE_TABLE, rate_label, rate_rows, stops_paying
from harness.analysis.runs import LoadedRun, RunInfo, by_node, result_rows
from harness.analysis.summary_columns import TABLE_COLUMNS  # the column registry: headers and order
from harness.tui.dialogs import ExportDialog
from harness.tui.messages import CompareRequested, ExportRequested, OpenRunRequested, ResumeRequested
from harness.tui.screens.section import SUB_TAB_KEYS, SectionScreen
from harness.tui.widgets.charts import BarChart
from harness.tui.widgets.table import Table

CATEGORY_COLUMNS = [
    ("variant", "variant", "{}"),
    ("concurrency", "conc", "{:.0f}"),
    ("category", "category", "{}"),
    ("requests", "reqs", "{:.0f}"),
    ("output_tokens", "out tokens", "{:.0f}"),
    ("decode_tok_s", "decode tok/s", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}"),
    ("accept_len_requests", "accept len", "{:.2f}"),
]
SHORT_STATUS = {"complete": "ok", "incomplete": "partial"}
# What a narrow terminal shows first (left to right); the rest follow in the CLI table's order, then the note.
# The variant column stays put while the table scrolls sideways.
PRIORITY = ("variant", "concurrency", "accept_len", "tok_s", "speedup", "speedup_ci", "verdict")
NARROW_W = 120  # below this width the runs list collapses (l shows it)


def column_order() -> list[int]:
    """Indices into TABLE_COLUMNS (and result_rows' cells) in display order."""
    keys = [k for k, _, _ in TABLE_COLUMNS]
    first = [keys.index(k) for k in PRIORITY if k in keys]
    return first + [i for i in range(len(keys)) if i not in first]
LEGEND = (
    "* fastest at that concurrency   ! slower than the baseline   break-even AL: accept length "
    "needed at this variant's step cost to match the baseline"
)

# what _show_result fills: all there, or the screen is going away
_SHOWN = ("results-title", "results-table", "categories-table", "results-tabs", "load-table", "load-note",
          "load-chart", "context-table", "context-note", "toks-chart")


class ResultsScreen(SectionScreen):
    SECTION = "results"
    HELP_KEYS = [("enter", "Open the run")]
    COMPONENT_CLASSES = {"results--winner", "results--slower", "results--failed"}
    BINDINGS = [
        Binding("m", "mark", "Mark for compare"),
        Binding("c", "compare", "Compare with marked"),
        Binding("e", "export", "Export CSV"),
        Binding("E", "export_tab", "Export tab's CSV"),
        Binding("l", "toggle_runs", "Runs list"),
        Binding("R", "resume", "Resume run"),
        Binding("u", "app.refresh_runs", "Refresh runs"),
        Binding("W", "weak_spots", "Weak spots -> data", show=False),
        *SUB_TAB_KEYS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: str | None = None
        self.runs_open: bool | None = None  # None: shown until a run is open when narrow; l decides
        self.order = column_order()

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        with Horizontal(id="results-main"):
            with Vertical(id="runs-pane"):
                yield Static("Runs (enter opens)", classes="pane-title")
                yield Table(id="runs-table", cursor_type="row")
            with Vertical(id="results-pane"):
                yield Static(
                    "no run open: pick one on the left, or finish a run",
                    id="results-title",
                    classes="pane-title",
                    markup=False,
                )
                yield Table(id="results-table", cursor_type="row", zebra_stripes=True)
                yield Static(LEGEND, id="results-legend")
                with TabbedContent(id="results-tabs"):
                    with TabPane("Categories", id="tab-categories"):
                        yield Table(id="categories-table", cursor_type="row", zebra_stripes=True)
                    with TabPane("tok/s chart", id="tab-chart"):
                        yield BarChart(id="toks-chart")
                    with TabPane("Load", id="tab-load"):  # shown for runs with run.request_rate
                        yield Static("", id="load-note", markup=False)
                        yield Table(id="load-table", cursor_type="row", zebra_stripes=True)
                        yield BarChart(id="load-chart")
                    with TabPane("Context", id="tab-context"):  # shown for runs with summary_by_context.csv
                        yield Static("", id="context-note", markup=False)
                        yield Table(id="context-table", cursor_type="row", zebra_stripes=True)
                    with TabPane("Compare", id="tab-compare"):
                        yield Static("mark a run (m), select another, press c", id="compare-title")
                        yield Table(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        runs = self.query_one("#runs-table", DataTable)
        runs.add_column("run", key="run")
        runs.add_column("status", key="status")
        table = self.query_one("#results-table", DataTable)
        table.fixed_columns = 1  # the variant stays put while scrolling sideways
        for i in self.order:
            key, label, _ = TABLE_COLUMNS[i]
            table.add_column(label, key=key)
        table.add_column("note", key="note")
        cats = self.query_one("#categories-table", DataTable)
        cats.fixed_columns = 1
        for key, label, _ in CATEGORY_COLUMNS:
            cats.add_column(label, key=key)
        load = self.query_one("#load-table", DataTable)
        load.fixed_columns = 1
        for key, label, _ in RATE_TABLE:
            load.add_column(label, key=key)
        self.query_one("#results-tabs", TabbedContent).hide_tab("tab-load")
        self.query_one("#results-tabs", TabbedContent).hide_tab("tab-context")
        self.watch(self.app, "runs", self._show_runs)
        self.watch(self.app, "result", self._show_result)
        self.watch(self.app, "comparison", self._show_comparison)
        runs.focus()
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """Narrow terminals give the table the width: the runs list shows until a run is open, or on l."""
        narrow = self.size.width < NARROW_W
        shown = not narrow or (self.runs_open if self.runs_open is not None else self.app.result is None)
        pane = self.query_one("#runs-pane")
        if pane.display != shown:
            pane.display = shown
            if not shown and self.query_one("#runs-table").has_focus:
                self.query_one("#results-table").focus()

    def action_toggle_runs(self) -> None:
        self.runs_open = not self.query_one("#runs-pane").display
        self._fit()
        if self.runs_open:
            self.query_one("#runs-table").focus()

    # ---- attributes down ----------------------------------------------------------------------------------
    def _show_runs(self, runs: tuple[RunInfo, ...]) -> None:
        table = self.query_one("#runs-table", DataTable)
        wanted = {r.run_dir: r for r in runs}
        with self.app.batch_update():
            for key in [k for k in table.rows if k.value not in wanted]:
                table.remove_row(key)
            for r in runs:
                mark = "> " if r.run_dir == self.marked else ""
                status = SHORT_STATUS.get(r.status, r.status) + (" sim" if r.simulated else "")
                if r.run_dir in table.rows:
                    table.update_cell(r.run_dir, "run", mark + r.run_id, update_width=True)
                    table.update_cell(r.run_dir, "status", status, update_width=True)
                else:
                    table.add_row(mark + r.run_id, status, key=r.run_dir)

    def _show_result(self, result: LoadedRun | None) -> None:
        if result is None or not self._widgets_up():
            return
        info = result.info
        sim = f"  SIMULATED: numbers from the {stand_ins(engines_of(result.summary))}, not a GPU" \
            if info.simulated else ""
        missing = result.missing
        gaps = f"\n{missing.headline()}: " + "; ".join(missing.lines()) if missing is not None else ""
        self.query_one("#results-title", Static).update(
            f"{info.run_id}  plan {info.plan}  [{info.status}]{sim}{gaps}"
        )
        table = self.query_one("#results-table", DataTable)
        rows = result_rows(result.summary, result.failures)
        with self.app.batch_update():
            table.clear()
            for row in rows:
                cells: list[object] = [row.cells[i] for i in self.order] + [row.note]
                prefix = ("*" if row.winner else "") + ("!" if row.slower else "")
                style_cls = (
                    "results--failed"
                    if row.failed
                    else "results--winner"
                    if row.winner
                    else "results--slower"
                    if row.slower
                    else None
                )
                style = self.get_component_rich_style(style_cls) if style_cls else ""
                cells[0] = Text(prefix + str(cells[0]), style=style)
                table.add_row(*cells, key=row.key)
            self._show_categories(result.categories)
            self._show_load(result.rates)
            self._show_context(result.contexts)
        self.runs_open = None if self.runs_open is None else False  # an opened run takes the width
        self._fit()
        chart_items = [
            (
                f"{r.key}",
                _tok_s(result.summary, r.key),
                "winner" if r.winner else "slower" if r.slower else "",
            )
            for r in rows
        ]
        self.query_one(BarChart).set_items(chart_items)

    def _widgets_up(self) -> bool:
        """False while the App shuts down: a run's results that arrive as it quits find the pane's widgets
        gone, one by one (the tables could still be there with the title already removed)."""
        return self.is_attached and all(bool(self.query(f"#{wid}")) for wid in _SHOWN)

    def _show_load(self, rates: pd.DataFrame | None) -> None:
        """Request-rate phases: the CLI's table, where speculation stops paying, and speedup per rate."""
        tabs = self.query_one("#results-tabs", TabbedContent)
        table = self.query_one("#load-table", DataTable)
        table.clear()
        if rates is None or rates.empty:
            if tabs.active == "tab-load":
                tabs.active = "tab-categories"
            tabs.hide_tab("tab-load")
            return
        tabs.show_tab("tab-load")
        for i, cells in enumerate(rate_rows(rates)):
            table.add_row(*cells, key=f"rate{i}")
        self.query_one("#load-note", Static).update(
            "speedup = baseline TPOT / variant TPOT at the same request rate (open loop)\n"
            + "\n".join(stops_paying(rates))
        )
        speed = rates.dropna(subset=["speedup"])
        self.query_one("#load-chart", BarChart).set_items([
            (f"{r.variant} @{rate_label(float(r.request_rate))}/s", float(r.speedup),
             "slower" if float(r.speedup) <= 1.0 else "")
            for r in speed.itertuples()  # summary_by_rate.csv's order: by variant, rates ascending
        ])

    def _show_context(self, table: pd.DataFrame | None) -> None:
        """Accept length per context-length bucket, as the CLI prints it
        (harness.analysis.by_context_report)."""
        tabs = self.query_one("#results-tabs", TabbedContent)
        headers, rows = context_grid(table if table is not None else pd.DataFrame(), "context")
        widget = self.query_one("#context-table", DataTable)
        widget.clear(columns=True)
        if not rows:
            if tabs.active == "tab-context":
                tabs.active = "tab-categories"
            tabs.hide_tab("tab-context")
            return
        tabs.show_tab("tab-context")
        for i, h in enumerate(headers):
            widget.add_column(h, key=f"h{i}")
        for i, cells in enumerate(rows):
            widget.add_row(*cells, key=f"ctx{i}")
        self.query_one("#context-note", Static).update(f"{TITLES['context']}; ?: fewer than {FEW_STEPS} "
                                                       "verify steps; per category and output position: "
                                                       "summary_by_context.csv")

    def _show_categories(self, df: pd.DataFrame) -> None:
        table = self.query_one("#categories-table", DataTable)
        table.clear()
        if df.empty:
            return
        for i, (_, row) in enumerate(df.sort_values(["category", "concurrency", "variant"]).iterrows()):
            table.add_row(*(fmt_cell(row.get(k), spec) for k, _, spec in CATEGORY_COLUMNS), key=f"cat{i}")

    def _show_comparison(self, comparison: Comparison | None) -> None:
        if comparison is None:
            return
        headers, rows = comparison_rows(comparison)
        table = self.query_one("#compare-table", DataTable)
        table.clear(columns=True)
        for i, h in enumerate(headers):
            table.add_column(h, key=f"c{i}")
        for key, cells in rows:
            table.add_row(*cells, key=key)
        self.query_one("#compare-title", Static).update(
            f"A = {comparison.a.run_id}   B = {comparison.b.run_id}   Δ% = B against A"
        )
        self.query_one("#results-tabs", TabbedContent).active = "tab-compare"

    # ---- messages up --------------------------------------------------------------------------------------
    def _selected_run(self) -> str | None:
        table = self.query_one("#runs-table", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "runs-table" and event.row_key.value:
            self.post_message(OpenRunRequested(event.row_key.value))

    def action_resume(self) -> None:
        run = self._selected_run()
        if run:
            self.post_message(ResumeRequested(run))

    def action_weak_spots(self) -> None:
        """The selected row's variant: its weak spots and a regeneration input (harness.tui.loop_control)."""
        result, table = self.app.result, self.query_one("#results-table", DataTable)
        if result is None or not table.row_count:
            self.notify("open a run and select a speculative variant's row first", severity="warning")
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or ""
        self.app.loop_control.weak_spots(result.info.run_dir, key.rpartition("@")[0])

    def action_mark(self) -> None:
        run = self._selected_run()
        self.marked = None if run == self.marked else run
        self._show_runs(self.app.runs)

    def action_compare(self) -> None:
        run = self._selected_run()
        if not self.marked or not run or run == self.marked:
            self.notify("mark one run with m, move to another and press c", severity="warning")
            return
        self.post_message(CompareRequested(self.marked, run))

    def action_export(self) -> None:
        result = self.app.result
        if result is None:
            self.notify("open a run first", severity="warning")
            return
        default = str(Path(result.info.run_dir) / "export-summary.csv")  # the run's own directory

        def done(path: str | None) -> None:
            if path:
                self.post_message(ExportRequested(path))

        self.app.push_screen(ExportDialog(default), done)

    def action_export_tab(self) -> None:
        """The table on the active tab: categories or the comparison (the chart has no table)."""
        tab = self.query_one("#results-tabs", TabbedContent).active
        what = {"tab-categories": "categories", "tab-compare": "compare"}.get(tab)
        result, comparison = self.app.result, self.app.comparison
        if what is None or (what == "categories" and result is None) \
                or (what == "compare" and comparison is None):
            self.notify("open the Categories or Compare tab with a table first", severity="warning")
            return
        # into the run's directory; a comparison into B's (the run compared against A), named after A
        where = Path(result.info.run_dir if what == "categories" else comparison.b.run_dir)
        name = "export-categories.csv" if what == "categories" \
            else f"export-compare-with-{comparison.a.run_id}.csv"
        default = str(where / name)

        def done(path: str | None) -> None:
            if path:
                self.post_message(ExportRequested(path, what))

        self.app.push_screen(ExportDialog(default, what), done)


def _tok_s(df: pd.DataFrame, key: str) -> float | None:
    variant, _, conc = key.rpartition("@")
    df = by_node(df)
    rows = df[(df["variant"].astype(str) == variant) & (df["concurrency"].astype(str) == conc)]
    if rows.empty:
        return None
    v = pd.to_numeric(rows.iloc[0]["tok_s"], errors="coerce")
    return None if pd.isna(v) else float(v)
