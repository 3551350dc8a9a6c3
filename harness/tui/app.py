"""The draftbench TUI. The App owns the long-lived workers and all state (its reactive attributes, which the
section screens watch: attributes down); screens post intents (messages up), and the App hands each message
to the half that handles it: servers, run, results, retrain, tune, session (harness.tui.half). Every action
calls the same core functions as the CLI.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from harness.common.errors import InputError
from harness.common.terminal import clean
from harness.tui import messages as msg
from harness.tui.dialogs import GENERAL_KEYS, HelpScreen, KeySections, key_list
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed
from harness.tui.loop_control import LoopControl
from harness.tui.results_control import ResultsControl
from harness.tui.retrain_control import RetrainControl
from harness.tui.run_control import RunControl, describe
from harness.tui.runproc import RunProcess
from harness.tui.runthread import RunEvents, RunThread
from harness.tui.screens.results import ResultsScreen
from harness.tui.screens.retrain import RetrainScreen
from harness.tui.screens.run import RunScreen
from harness.tui.screens.section import SectionScreen
from harness.tui.screens.servers import ServersScreen
from harness.tui.screens.tune import TuneScreen
from harness.tui.servers_control import ServersControl
from harness.tui.session_control import SessionControl
from harness.tui.state import Alarm, ProgressSnapshot, ServerView
from harness.tui.tune_control import TuneControl

if TYPE_CHECKING:
    from typing import Unpack

    from textual.notifications import SeverityLevel

    from harness.analysis.compare import Comparison
    from harness.analysis.runs import LoadedRun
    from harness.inputs.config import Plan
    from harness.retrain.progress import TrainProgress
    from harness.retrain.regen_rows import RegenProgress
    from harness.serve.fleet import Fleet
    from harness.serve.fleet_nodes import NodeFleet
    from harness.targets.base import Target

SECTIONS: list[tuple[str, str, type[SectionScreen]]] = [
    ("servers", "Servers", ServersScreen),
    ("run", "Run", RunScreen),
    ("results", "Results", ResultsScreen),
    ("retrain", "Retrain", RetrainScreen),
    ("tune", "Tune", TuneScreen),
]
GPU_POLL_S = 5.0


class DraftbenchApp(App[int]):
    CSS_PATH = "draftbench.tcss"
    TITLE = "draftbench"
    BINDINGS = [
        Binding("1", "section('servers')", "Servers", show=False),
        Binding("2", "section('run')", "Run", show=False),
        Binding("3", "section('results')", "Results", show=False),
        Binding("4", "section('retrain')", "Retrain", show=False),
        Binding("5", "section('tune')", "Tune", show=False),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
    ]

    # ---- the state the screens watch ----------------------------------------------------------------------
    plan: var[Plan | None] = var(None)
    plan_line: var[str] = var("loading the plan...")
    servers: var[dict[str, ServerView]] = var(dict)
    # live alarms of runs and Servers, as the Run tab lists them
    live_alarms: var[tuple[str, ...]] = var(tuple)
    # the run going or last gone (run_control.py)
    run_state: var[str] = var("idle")  # idle | preparing | running | cancelling | done | failed | cancelled
    run_status: var[str] = var("idle: choose suites, variants, concurrency and max tokens, then ctrl+r")
    progress: var[ProgressSnapshot | None] = var(None)
    run_failures: var[dict[str, str]] = var(dict)  # variant -> why it failed, this run (analysis.failures)
    nodes: var[dict[str, tuple[str, tuple[str, ...], str]]] = var(dict)  # node -> (state, variants, detail)
    run_verdicts: var[dict[str, str]] = var(dict)  # finished variant -> its verdicts so far (verdict_lines)
    # Results (results_control.py)
    runs: var[tuple] = var(tuple)
    result: var[LoadedRun | None] = var(None)
    comparison: var[Comparison | None] = var(None)
    drafters: var[tuple] = var(tuple)
    # Retrain (retrain_control.py)
    jobs: var[tuple] = var(tuple)
    job_progress: var[TrainProgress | None] = var(None)  # of the followed job
    checkpoints: var[tuple] = var(tuple)  # of the followed job
    regen_progress: var[RegenProgress | None] = var(None)
    retrain_note: var[str] = var("")
    # the tune going or on display (tune_control.py)
    tune_state: var[str] = var("idle")  # idle | preparing | running | cancelling | done | failed | cancelled
    tune_status: var[str] = var("idle: choose the variant, concurrency and budget, then ctrl+r (r resumes)")
    tune_stage: var[tuple[str, float, float]] = var(("", 0.0, 0.0))  # stage, spent_s, budget_s
    # the clock when tune_stage's spent_s held (the view counts on from it)
    tune_stage_at: float | None = None
    tune_dir: var[str | None] = var(None)
    tune_progress: var[ProgressSnapshot | None] = var(None)
    tune_candidates: var[dict[str, str]] = var(dict)  # config -> its latest TuneCandidate status
    tune_view: var[Any] = var(None)  # harness.studies.tune_view.TuneView of tune_dir
    tunes: var[tuple[str, ...]] = var(tuple)  # tune directories under results_dir, newest first

    def __init__(
        self,
        *,
        plan_path: str | None = None,
        plan: Plan | None = None,
        results_dir: str | Path = "results",
        run_events: RunEvents | None = None,
        fleet_factory: Callable[..., Fleet] | None = None,
        target_factory: Callable[[], Target] | None = None,
        section: str = "servers",
        flush_interval: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        gpu_poll_s: float = GPU_POLL_S,
        theme: str | None = None,
        drafter_dirs: list[Path] | None = None,
    ) -> None:
        super().__init__()
        self.plan_path = plan_path
        self._given_plan = plan
        self.results_dir = Path(results_dir)
        self.run_events = run_events
        self.fleet_factory = fleet_factory
        self.target_factory = target_factory
        self.start_section = section
        self.flush_interval = flush_interval
        self.clock = clock
        self.gpu_poll_s = gpu_poll_s
        self.drafter_dirs = drafter_dirs  # None: where the config looks drafters up for this plan
        if theme:
            self.theme = theme
        self.fleet: Fleet | NodeFleet | None = None
        self.fleet_feed = EventFeed(self.post_message, source="fleet")
        self.log_buffers: dict[str, deque[str]] = {}
        self.plan_alarms: list[Alarm] = []
        self.run_thread: RunThread | RunProcess | None = None
        self.run_dir: str | None = None
        self.run_variants: tuple[str, ...] = ()  # the variants of the run going or last run
        # the halves, each over this App's state; a message goes to them in this order
        self.servers_control = ServersControl(self)
        self.run_control = RunControl(self)
        self.results_control = ResultsControl(self)
        self.retrain_control = RetrainControl(self)
        self.loop_control = LoopControl(self)
        self.tune_control = TuneControl(self)
        self.session_control = SessionControl(self)
        self._routes: dict[type[Message], list[Callable[[Any], Any]]] = {}
        for half in (self.servers_control, self.run_control, self.results_control, self.retrain_control,
                     self.loop_control,
                     self.tune_control, self.session_control):
            for message, handler in half.handlers():
                self._routes.setdefault(message, []).append(handler)

    @on(msg.AppMessage)
    def _route(self, m: msg.AppMessage) -> None:
        """Every message of harness.tui.messages to the halves that handle it, in the halves' order."""
        for handler in self._routes.get(type(m), ()):
            handler(m)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None,
               markup: bool = False) -> None:
        """Every notification is plain text: its words come from servers, suites and error messages, and a
        log line like `[/models/x]` read as markup raised MarkupError. Control characters made visible."""
        super().notify(clean(message), title=clean(title, one_line=True), severity=severity, timeout=timeout,
                       markup=False)

    # ---- startup ------------------------------------------------------------------------------------------
    def on_mount(self) -> None:
        for name, _, cls in SECTIONS:
            self.install_screen(cls(), name)
        self.push_screen(self.start_section)
        self.set_interval(self.flush_interval, self.fleet_feed.flush)
        self.set_interval(1.0, self._tick)
        if self.gpu_poll_s > 0:
            self.set_interval(self.gpu_poll_s, self.servers_control.poll_gpu)
        if self._given_plan is not None:
            self.post_message(msg.PlanLoaded(self._given_plan, str(self.plan_path or "")))
        else:
            self._load_plan()
        self.action_refresh_runs()
        self.action_refresh_jobs()
        self.call_after_refresh(self.settle)

    def settle(self) -> None:
        """A full collection walks every tracked object and stops the UI meanwhile (150-450 ms pauses in
        benchmarks/tui_responsiveness.py). What lives as long as the app (modules, screens, the plan) is
        frozen after each one-time setup step, so collections walk only what changes."""
        gc.freeze()

    @work(thread=True, group="plan", exit_on_error=False)
    def _load_plan(self) -> None:
        from harness.cli.demo import load_ready_plan, prepare_demo  # the plan's models: on the worker thread

        if self.plan_path:
            if not Path(self.plan_path).exists():
                raise InputError(self.plan_path, None, None, "plan file not found")
            plan = load_ready_plan(self.plan_path, self.results_dir)  # relative demo paths get checkpoints
        else:
            plan = prepare_demo(self.results_dir)
        self.post_message(msg.PlanLoaded(plan, str(self.plan_path or "demo plan")))

    # ---- actions: the keys and the palette; each one half's ------------------------------------------------
    def action_refresh_runs(self) -> None:
        self.results_control.refresh_runs()

    def action_refresh_drafters(self) -> None:
        self.results_control.refresh_drafters()

    def action_refresh_jobs(self) -> None:
        self.retrain_control.refresh_jobs()

    def action_refresh_tunes(self) -> None:
        self.tune_control.refresh_tunes()

    def action_preflight(self) -> None:
        self.session_control.preflight()

    async def action_quit(self) -> None:
        await self.session_control.quit()

    # ---- sections, help, palette ---------------------------------------------------------------------------
    def action_section(self, name: str) -> None:
        if isinstance(self.screen, SectionScreen) and self.screen is not self.get_screen(name):
            first_visit = not self.get_screen(name).is_mounted
            self.switch_screen(name)
            if first_visit:  # a section's widgets are made on its first visit and live on
                self.call_after_refresh(self.settle)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            # made once: new widgets on every `?` cost ~20 ms and churn for the collector
            if not self.is_screen_installed("help"):
                self.install_screen(HelpScreen(key_sections()), "help")
            self.push_screen("help")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's own "Quit" is ours (key q) said once, with what it does
        yield from (c for c in super().get_system_commands(screen) if c.title != "Quit")
        for b in self.BINDINGS:
            if b.action == "quit":
                yield SystemCommand("Quit", "key q: asks first when a run, a tune or servers are going",
                                    self.action_quit)
                continue
            yield SystemCommand(
                b.description, f"key {b.key_display or b.key}", partial(self.run_action, b.action)
            )
        yield SystemCommand(
            "Preflight: draftbench check",
            "the plan's checks (flags, drafter against algorithm, shapes); the "
            "findings as the CLI prints them",
            self.action_preflight,
        )
        for name, title, cls in SECTIONS:
            for b in cls.BINDINGS:
                yield SystemCommand(
                    f"{title}: {b.description}",
                    f"key {b.key_display or b.key} in {title}",
                    partial(self._section_action, name, b.action),
                )

    async def _section_action(self, section: str, action: str) -> None:
        self.action_section(section)
        await self.get_screen(section).run_action(action)

    async def on_unmount(self) -> None:
        """Any other way out (an exception, a test ending, App.exit) still stops the servers this TUI
        started."""
        gc.unfreeze()  # what was frozen for the app's lifetime can be collected again
        if self.tune_control.proc is not None:  # its process stops the tune's servers on SIGTERM
            self.tune_control.proc.cancel()
        if self.fleet is not None:
            fleet, self.fleet = self.fleet, None
            with contextlib.suppress(Exception):
                await fleet.close()

    def mounted(self, name: str) -> Screen | None:
        """The section's screen when it is on display or was (a timer may fire while the app shuts down)."""
        if not self.is_screen_installed(name):
            return None
        screen = self.get_screen(name)
        return screen if screen.is_mounted else None

    def _tick(self) -> None:
        """Clocks that move every second: uptimes, a run's elapsed and ETA, a tune's budget. A screen whose
        widgets are already gone (the app closing) is skipped."""
        due = [
            ("servers", any(v.state == "ready" for v in self.servers.values())),
            ("run", self.run_state in ("preparing", "running") and self.progress is not None),
            ("tune", self.tune_state in ("preparing", "running")),
        ]
        for name, moving in due:
            screen = self.mounted(name) if moving else None
            if screen is not None:
                with contextlib.suppress(NoMatches):
                    screen.tick(self.clock())

    # ---- the one error handler ----------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(msg.TaskFailed(event.worker.group, describe(event.worker.error)))

    @on(msg.TaskFailed)
    def _task_failed(self, m: msg.TaskFailed) -> None:
        if m.what == "plan":
            self.plan_line = f"could not load the plan: {m.error}"
        elif m.what == "run":
            self.run_control.set_state("failed", f"the run could not start: {m.error}")
        self.notify(m.error, title=f"{m.what} failed", severity="error", timeout=15)


def key_sections() -> KeySections:
    """Every key by where it works, from the classes' BINDINGS: `?` help and the README's table."""
    return [("Everywhere", key_list(DraftbenchApp.BINDINGS) + GENERAL_KEYS)] + [
        (title, key_list(cls.BINDINGS) + cls.HELP_KEYS) for _, title, cls in SECTIONS if cls.BINDINGS
    ]


class AppOptions(TypedDict, total=False):
    """DraftbenchApp's other keywords, as build_app passes them on."""

    plan: Plan | None
    run_events: RunEvents | None
    fleet_factory: Callable[..., Fleet] | None
    target_factory: Callable[[], Target] | None
    section: str
    flush_interval: float
    clock: Callable[[], float]
    gpu_poll_s: float
    theme: str | None
    drafter_dirs: list[Path] | None


def build_app(
    plan_path: str | None = None, results_dir: str | Path = "results", **kwargs: Unpack[AppOptions]
) -> DraftbenchApp:
    """The one factory: the CLI and the tests build the app the same way, everything through here."""
    return DraftbenchApp(plan_path=plan_path, results_dir=results_dir, **kwargs)


def run_tui(plan_path: str | None, results_dir: str) -> int:
    """`draftbench` / `draftbench tui [PLAN]`: the demo plan when no plan is given."""
    app = build_app(plan_path, results_dir)
    code = app.run()
    return int(code or 0)
