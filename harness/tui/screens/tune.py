"""Tune: `draftbench tune` for one drafter: pick the variant, concurrency and budget; start, cancel or resume;
watch the stage, the budget and the grid fill; the heatmap and the answer per concurrency when done; w adds
the winner to the plan (--write-plan). The App's TuneControl does the work; this screen renders its state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from harness.cli.args import duration, graphs, levels_or_auto, positive_ints
from harness.tui import messages as msg
from harness.tui.screens.section import SectionScreen
from harness.tui.state import ProgressSnapshot, TuneChoice
from harness.tui.tune_control import ACTIVE_TUNE
from harness.tui.widgets.table import Table

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.studies.tune_view import TuneView

T = TypeVar("T")

STAGES = {
    "wide": "wide run",
    "preflight": "preflight",
    "step-cost": "step-cost phases",
    "verify": "verification",
    "report": "report",
}
COLUMNS = [
    ("config", "config"),
    ("steps", "steps"),
    ("topk", "topk"),
    ("ndt", "ndt"),
    ("graph", "graphs"),
    ("conc", "conc"),
    ("al", "pred AL"),
    ("step", "step ms"),
    ("pred", "pred x"),
    ("meas", "measured x (95% CI)"),
    ("flag", "meas."),
    ("status", "status"),
]
MEASURED = ("step", "verified")
GRAPHS = [("on and off", "both"), ("on", "on"), ("off", "off")]


def _f(v: float | None, spec: str = "{:.2f}") -> str:
    return "-" if v is None else spec.format(v)


def grid_cells(row: dict[str, Any], live: str | None) -> tuple[str, ...]:
    """One tune.csv row as the table's cells; `live` is the config's latest status from the running tune."""
    step = (
        _f(row["step_ms"])
        if row["step_ms"] is not None
        else ("~" + _f(row["step_ms_prior"]) if row["step_ms_prior"] is not None else "-")
    )
    meas = _f(row["speedup"])
    if row["speedup"] is not None and row["speedup_ci_low"] is not None:
        meas += f" ({row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f})"
    return (
        row["config"],
        str(row["num_steps"]),
        str(row["eagle_topk"]),
        str(row["num_draft_tokens"]),
        "on" if row["cuda_graph"] else "off",
        str(row["concurrency"]),
        _f(row["accept_len_pred"]),
        step,
        _f(row["speedup_pred"]) + ("x" if row["speedup_pred"] is not None else ""),
        meas,
        row["measured"] or "-",
        live or row["status"] or "-",
    )


def progress_text(
    stage: tuple[str, float, float], view: TuneView | None, live: dict[str, str], p: ProgressSnapshot | None,
    since_s: float | None = None,
) -> str:
    """`since_s`: seconds since the stage's spent_s was measured, while the tune runs (the clock moves on
    between its stages, which come minutes apart); None when nothing runs."""
    name, spent, budget = stage
    if view is not None and since_s is None:  # nothing runs: the tune directory says where it stands
        name, spent, budget = view.stage, view.spent_s, view.budget_s
    spent += since_s or 0.0
    grid = len(view.grid) if view is not None else 0
    done = {r["config"] for r in (view.rows if view is not None else ()) if r["measured"] in MEASURED}
    done |= {c for c, s in live.items() if s in ("measured", "verified")}
    lines = [
        f"stage: {STAGES.get(name, name) or '-'}   configs measured: {len(done)} of {grid or '?'}",
        f"budget: {spent:.0f} s spent of {budget:.0f} s, {max(budget - spent, 0.0):.0f} s left"
        if budget else "budget: -",
    ]
    going = [c for c, s in live.items() if s in ("measuring", "verifying")]
    if going:
        lines.append(f"now: {going[-1]} ({live[going[-1]]})")
    if p is not None and p.total:
        lines.append(
            f"this stage's run: requests {p.done} of {max(p.total, p.done)}"
            + (f"   {p.variant} {p.phase} ({p.phase_done}/{p.phase_total})" if p.phase else "")
        )
    return "\n".join(lines)


def answer_text(view: TuneView | None) -> str:
    if view is None or not view.finished:
        return "the answer per concurrency and the heatmaps come when the tune finishes"
    out = list(view.answer) or ["no answer: the wide run gave nothing to predict from"]
    for c in view.concurrency:
        if c in view.heatmaps:
            out += ["", view.heatmaps[c]]
    if view.crossover:  # --concurrency auto: the crossover, its chart and the schedule
        out += ["", view.crossover]
    return "\n".join(out)


class TuneScreen(SectionScreen):
    SECTION = "tune"
    BINDINGS = [
        Binding("ctrl+r", "start_tune", "Start tune", priority=True),
        Binding("ctrl+g", "cancel_tune", "Cancel tune", priority=True),
        Binding("r", "resume", "Resume tune"),
        Binding("o", "open", "Show tune"),
        Binding("w", "write_winner", "Add winner to plan"),
        Binding("u", "refresh", "Refresh tunes", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        with Horizontal(id="tune-main"):
            with Vertical(id="tune-form"):  # compact: Start and the tunes list in view at 80x24
                yield Label("Speculative variant to tune", classes="form-label")
                yield Select[str]([], id="tune-variant", allow_blank=True, prompt="the plan's first drafter",
                                  compact=True)
                with Horizontal(classes="field-row first"):
                    yield Label("Concurrency", classes="field-label")
                    yield Input(id="tune-concurrency", placeholder="1,8,32 or auto", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("Budget", classes="field-label")
                    yield Input("2h", id="tune-budget", placeholder="90m, 2h, 3600", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("num_steps", classes="field-label")
                    yield Input("1,2,3,4,5,6,7", id="tune-steps", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("CUDA graphs", classes="field-label")
                    yield Select(GRAPHS, id="tune-graphs", value="both", allow_blank=False, compact=True)
                with Horizontal(id="tune-buttons"):
                    yield Button("Start", id="start-tune", variant="primary", compact=True)
                    yield Button("Cancel", id="cancel-tune", variant="error", disabled=True, compact=True)
                yield Label("Tunes (r resumes, o shows)", classes="form-label tunes-label")
                yield Table(id="tune-dirs", cursor_type="row")
            with Vertical(id="tune-live"):
                yield Static("", id="tune-status", classes="pane-title", markup=False)
                yield Static("", id="tune-progress", markup=False)
                yield Table(id="tune-grid", cursor_type="row", zebra_stripes=True)
                with VerticalScroll(id="tune-answer-pane"):
                    yield Static(answer_text(None), id="tune-answer", markup=False)
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self._cells: dict[str, tuple[str, ...]] = {}
        grid = self.query_one("#tune-grid", Table)
        for key, label in COLUMNS:
            grid.add_column(label, key=key)
        self.query_one("#tune-dirs", Table).add_column("tune directory", key="dir")
        self.watch(self.app, "plan", self._show_plan)
        self.watch(self.app, "tune_state", self._show_state)
        self.watch(self.app, "tune_status", self._show_status)
        for name in ("tune_stage", "tune_progress", "tune_candidates"):
            self.watch(self.app, name, self._show_progress)
        self.watch(self.app, "tune_view", self._show_view)
        self.watch(self.app, "tunes", self._show_tunes)
        self.app.action_refresh_tunes()

    # ---- attributes down ----------------------------------------------------------------------------------
    def _show_plan(self, plan: Plan | None) -> None:
        if plan is None:
            return
        specs = [v.name for v in plan.variants if v.is_speculative and v.drafter is not None]
        self.query_one("#tune-variant", Select).set_options([(n, n) for n in specs])
        if specs:
            self.query_one("#tune-variant", Select).value = specs[0]
        self.query_one("#tune-concurrency", Input).value = ",".join(str(c) for c in plan.run.concurrency)

    def _show_state(self, state: str) -> None:
        self.query_one("#start-tune", Button).disabled = state in ACTIVE_TUNE
        self.query_one("#cancel-tune", Button).disabled = state not in ("preparing", "running")

    def _show_status(self, text: str) -> None:
        self.query_one("#tune-status", Static).update(text)

    def tick(self, now: float) -> None:
        """The budget's clock moves every second while a tune runs."""
        self._progress_at(now)

    def _show_progress(self, _: object = None) -> None:
        self._progress_at(self.app.clock())

    def _progress_at(self, now: float) -> None:
        app = self.app
        running = app.tune_state in ("preparing", "running") and app.tune_stage_at is not None
        since = max(0.0, now - app.tune_stage_at) if running else None
        self.query_one("#tune-progress", Static).update(
            progress_text(app.tune_stage, app.tune_view, app.tune_candidates, app.tune_progress, since)
        )
        if app.tune_view is not None:
            self._fill_grid(app.tune_view)

    def _show_view(self, view: TuneView | None) -> None:
        self._show_progress()
        self.query_one("#tune-answer", Static).update(answer_text(view))
        if view is None:
            self._fill_grid(None)

    def _fill_grid(self, view: TuneView | None) -> None:
        """Cells updated by stable row key (config@concurrency); rows of another tune removed."""
        table = self.query_one("#tune-grid", Table)
        live = self.app.tune_candidates
        rows = {
            f"{r['config']}@c{r['concurrency']}": grid_cells(r, live.get(r["config"]))
            for r in (view.rows if view is not None else ())
        }
        with self.app.batch_update():
            for key in [k for k in self._cells if k not in rows]:
                table.remove_row(key)
                del self._cells[key]
            for key, cells in rows.items():
                old = self._cells.get(key)
                if old is None:
                    table.add_row(*cells, key=key)
                else:
                    for (col, _), new, was in zip(COLUMNS, cells, old, strict=True):
                        if new != was:
                            table.update_cell(key, col, new)
                self._cells[key] = cells

    def _show_tunes(self, dirs: tuple[str, ...]) -> None:
        table = self.query_one("#tune-dirs", Table)
        table.clear()
        for d in dirs:
            table.add_row(Path(d).name, key=d)

    # ---- messages up --------------------------------------------------------------------------------------
    def choice(self) -> TuneChoice:
        """The form as a TuneChoice; ValueError says which field is wrong."""
        def parsed(field: str, what: str, fn: Callable[[str], T]) -> T:
            try:
                return fn(self.query_one(f"#{field}", Input).value)
            except Exception as exc:  # argparse.ArgumentTypeError: the CLI's own words
                raise ValueError(f"{what}: {exc}") from None

        conc_text = self.query_one("#tune-concurrency", Input).value.strip()
        variant = self.query_one("#tune-variant", Select).value
        levels = parsed("tune-concurrency", "concurrency", levels_or_auto) if conc_text else None
        return TuneChoice(
            variant=variant if isinstance(variant, str) else None,
            budget_s=parsed("tune-budget", "budget", duration),
            concurrency=None if levels == "auto" else levels,
            auto=levels == "auto",
            steps=parsed("tune-steps", "num_steps", positive_ints),
            graphs=graphs(str(self.query_one("#tune-graphs", Select).value)),
        )

    def _selected_dir(self) -> str | None:
        table = self.query_one("#tune-dirs", Table)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_start_tune(self) -> None:
        try:
            choice = self.choice()
        except ValueError as exc:
            self.notify(str(exc), title="Cannot start the tune", severity="error")
            return
        self.post_message(msg.TuneRequested(choice))

    def action_resume(self) -> None:
        d = self._selected_dir()
        if d is None:
            self.notify("no tune directory to resume", severity="warning")
            return
        try:
            budget = self.choice().budget_s
        except ValueError as exc:
            self.notify(str(exc), title="Cannot resume the tune", severity="error")
            return
        self.post_message(msg.TuneResumeRequested(d, budget))

    def action_open(self) -> None:
        d = self._selected_dir()
        if d is not None:
            self.post_message(msg.TuneOpenRequested(d))

    def action_refresh(self) -> None:
        self.app.action_refresh_tunes()

    def action_write_winner(self) -> None:
        self.post_message(msg.WriteWinnerRequested())

    def action_cancel_tune(self) -> None:
        if self.app.tune_state not in ("preparing", "running"):
            return
        self.app.session_control.confirm(
            "Cancel the tune? Its servers are stopped; measurements are kept (r resumes it).",
            [("yes", "Cancel the tune")],
            lambda _: self.post_message(msg.TuneCancelRequested()),
        )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start-tune":
            self.action_start_tune()
        elif event.button.id == "cancel-tune":
            self.action_cancel_tune()
