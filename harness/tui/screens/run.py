"""Run: choose suites, variants, concurrency and max tokens; start; watch progress and small plots; cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from harness.analysis.runs import parse_concurrency, suite_names
from harness.common.errors import InputError
from harness.common.terminal import clean
from harness.tui.messages import CancelRequested, RunRequested
from harness.tui.screens.section import SectionScreen
from harness.tui.state import ProgressSnapshot, RunChoice
from harness.tui.widgets.charts import SeriesPanel
from harness.tui.widgets.progress_panel import ProgressPanel
from harness.tui.widgets.toggles import Checkbox, SelectionList

if TYPE_CHECKING:
    from harness.inputs.config import Plan

ACTIVE = ("preparing", "running", "cancelling")


class RunScreen(SectionScreen):
    SECTION = "run"
    BINDINGS = [
        Binding("ctrl+r", "start_run", "Start run", priority=True),
        Binding("ctrl+g", "cancel_run", "Cancel run", priority=True),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        with Horizontal(id="run-main"):
            with VerticalScroll(id="run-form"):  # compact: Start in view at 80x24; a long plan scrolls
                yield Label("Suites", classes="form-label")
                yield SelectionList[str](id="pick-suites", compact=True)
                yield Label("Variants", classes="form-label")
                yield SelectionList[str](id="pick-variants", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("Concurrency", classes="field-label")
                    yield Input(id="concurrency", placeholder="1,4", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("Max tokens", classes="field-label")
                    yield Input(id="max-tokens", type="integer", placeholder="256", compact=True)
                with Horizontal(classes="field-row"):
                    yield Label("Repeats", classes="field-label")
                    yield Input(id="repeats", type="integer", placeholder="1", compact=True)
                yield Checkbox("Keep servers running afterwards", id="keep-servers", compact=True)
                with Horizontal(id="run-buttons"):
                    yield Button("Start", id="start-run", variant="primary", compact=True)
                    yield Button("Cancel", id="cancel-run", variant="error", disabled=True, compact=True)
            with VerticalScroll(id="run-live"):  # at 80x24 the verdicts and plots scroll into view
                yield ProgressPanel(id="progress")
                yield Static("", id="run-nodes", markup=False)
                yield Static("", id="run-alarms", markup=False)
                yield SeriesPanel("accept length (decode windows)", lambda v: f"{v:.2f}", id="accept-plot")
                yield SeriesPanel("tok/s (server gen throughput)", lambda v: f"{v:.0f}", id="toks-plot")
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.watch(self.app, "plan", self._show_plan)
        self.watch(self.app, "run_state", self._show_state)
        self.watch(self.app, "run_status", self._show_status)
        self.watch(self.app, "progress", self._show_progress)
        self.watch(self.app, "run_verdicts", self._show_progress)
        self.watch(self.app, "live_alarms", self._show_alarms)
        self.watch(self.app, "nodes", self._show_nodes)

    # ---- attributes down ----------------------------------------------------------------------------------
    def _show_plan(self, plan: Plan | None) -> None:
        if plan is None:
            return
        suites = self.query_one("#pick-suites", SelectionList)
        suites.clear_options()
        # the plan's suites picked, every other one under suites/ offered
        mine = {s.name for s in plan.suites}
        suites.add_options([(n, n, n in mine) for n in suite_names(plan)])
        variants = self.query_one("#pick-variants", SelectionList)
        variants.clear_options()
        variants.add_options(
            [(v.name + ("  (baseline)" if v.is_baseline else ""), v.name, True) for v in plan.variants]
        )
        self.query_one("#concurrency", Input).value = ",".join(str(c) for c in plan.run.concurrency)
        self.query_one("#max-tokens", Input).value = str(plan.run.max_tokens)
        self.query_one("#repeats", Input).value = str(plan.run.repeats or 1)
        self.query_one("#keep-servers", Checkbox).value = bool(plan.server.keep_running)

    def _show_state(self, state: str) -> None:
        active = state in ACTIVE
        self.query_one("#start-run", Button).disabled = active
        self.query_one("#cancel-run", Button).disabled = state not in ("preparing", "running")

    def tick(self, now: float) -> None:
        """Elapsed and ETA move every second while a run goes, between the run's own updates."""
        self.query_one(ProgressPanel).show_progress(self.app.progress, now, self.app.run_verdicts)

    def _show_alarms(self, lines: tuple[str, ...]) -> None:
        shown = self.query_one("#run-alarms", Static)
        shown.display = bool(lines)
        # the newest; all are in Servers' detail
        shown.update("\n".join(f"! {clean(ln, one_line=True)}" for ln in lines[-4:]))

    def _show_nodes(self, nodes: dict[str, tuple[str, tuple[str, ...], str]]) -> None:
        """A plan with several targets: each node's state and the variants it measures."""
        shown = self.query_one("#run-nodes", Static)
        shown.display = bool(nodes)
        shown.update(clean("\n".join(f"{node}  {state}: {', '.join(variants) or '-'}"
                                     + (f"  ({detail})" if detail else "")
                                     for node, (state, variants, detail) in nodes.items())))

    def _show_status(self, text: str) -> None:
        self.query_one(ProgressPanel).show_status(text)

    def _show_progress(self, _: object = None) -> None:
        p: ProgressSnapshot | None = self.app.progress
        self.query_one(ProgressPanel).show_progress(p, self.app.clock(), self.app.run_verdicts)
        if p is not None:
            self.query_one("#accept-plot", SeriesPanel).update_series(p.accept_series)
            self.query_one("#toks-plot", SeriesPanel).update_series(p.tok_s_series)

    # ---- messages up --------------------------------------------------------------------------------------
    def choice(self) -> RunChoice:
        """The form as a RunChoice; InputError names the field that is wrong."""
        conc = parse_concurrency(self.query_one("#concurrency", Input).value)
        text = self.query_one("#max-tokens", Input).value.strip()
        if not text.isdigit() or int(text) <= 0:
            raise InputError(None, None, "max_tokens", f"must be a whole number above 0, got {text!r}")
        return RunChoice(
            suites=tuple(self.query_one("#pick-suites", SelectionList).selected),
            variants=tuple(self.query_one("#pick-variants", SelectionList).selected),
            concurrency=conc,
            max_tokens=int(text),
            keep_servers=self.query_one("#keep-servers", Checkbox).value,
            repeats=self._repeats(),
        )

    def _repeats(self) -> int | None:
        text = self.query_one("#repeats", Input).value.strip()
        if not text:
            return None
        if not text.isdigit() or int(text) <= 0:
            raise InputError(None, None, "repeats", f"must be a whole number above 0, got {text!r}")
        return int(text)

    def action_start_run(self) -> None:
        try:
            choice = self.choice()
        except InputError as exc:
            self.notify(f"{exc.field}: {exc.message}", title="Cannot start the run", severity="error")
            return
        self.post_message(RunRequested(choice))

    def action_cancel_run(self) -> None:
        if self.app.run_state not in ("preparing", "running"):
            return
        self.app.session_control.confirm(
            "Cancel the run? Finished requests are kept (resume it later); its servers are stopped.",
            [("yes", "Cancel the run")],
            lambda _: self.post_message(CancelRequested()),
        )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start-run":
            self.action_start_run()
        elif event.button.id == "cancel-run":
            self.action_cancel_run()
