"""The draftbench TUI. The App owns the long-lived workers and all state; section screens render that state
(attributes down) and post intents (messages up). Every action calls the same core functions as the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.reactive import var
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from harness.analysis.engines_table import stand_ins
from harness.common.errors import InputError
from harness.common.terminal import clean
from harness.tui import messages as msg
from harness.tui.dialogs import GENERAL_KEYS, HelpScreen, KeySections, key_list
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed
from harness.tui.loop_control import LoopControl
from harness.tui.results_control import ResultsControl
from harness.tui.retrain_control import RetrainControl
from harness.tui.run_control import ACTIVE_RUN, RunControl, describe
from harness.tui.runproc import RunProcess
from harness.tui.runthread import RunEvents, RunThread
from harness.tui.screens.results import ResultsScreen
from harness.tui.screens.retrain import RetrainScreen
from harness.tui.screens.run import RunScreen
from harness.tui.screens.section import SectionScreen
from harness.tui.screens.servers import ServersScreen
from harness.tui.screens.tune import TuneScreen
from harness.tui.session_control import SessionControl
from harness.tui.state import Alarm, ServerView
from harness.tui.tune_control import TuneControl
from harness.tui.widgets.log_pane import LOG_LINES

SECTIONS: list[tuple[str, str, type[SectionScreen]]] = [
    ("servers", "Servers", ServersScreen),
    ("run", "Run", RunScreen),
    ("results", "Results", ResultsScreen),
    ("retrain", "Retrain", RetrainScreen),
    ("tune", "Tune", TuneScreen),
]
GPU_POLL_S = 5.0
LIVE_ALARMS = ("drafter-inert", "cuda-graph-off", "slower-than-baseline")


class DraftbenchApp(RunControl, ResultsControl, RetrainControl, LoopControl, TuneControl, SessionControl):
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

    plan: var[Any] = var(None)
    plan_line: var[str] = var("loading the plan...")
    servers: var[dict[str, ServerView]] = var(dict)
    live_alarms: var[tuple[str, ...]] = var(tuple)  # live alarms of runs and Servers, as the Run tab lists them

    def __init__(
        self,
        *,
        plan_path: str | None = None,
        plan: Any = None,
        results_dir: str | Path = "results",
        run_events: RunEvents | None = None,
        fleet_factory: Callable[..., Any] | None = None,
        target_factory: Callable[[], Any] | None = None,
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
        self.fleet: Any = None
        self.fleet_feed = EventFeed(self.post_message, source="fleet")
        self.log_buffers: dict[str, deque[str]] = {}
        self.plan_alarms: list[Alarm] = []
        self.run_thread: RunThread | RunProcess | None = None
        self.run_dir: str | None = None
        self.run_variants: tuple[str, ...] = ()  # the variants of the run going or last run

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
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
            self.set_interval(self.gpu_poll_s, self._poll_gpu)
        if self._given_plan is not None:
            self.post_message(msg.PlanLoaded(self._given_plan, str(self.plan_path or "")))
        else:
            self._load_plan()
        self.action_refresh_runs()
        self.action_refresh_jobs()
        self.call_after_refresh(self._settle)

    def _settle(self) -> None:
        """A full collection walks every tracked object and stops the UI meanwhile (150-450 ms pauses in
        benchmarks/tui_responsiveness.py). What lives as long as the app (modules, screens, the plan) is
        frozen after each one-time setup step, so collections walk only what changes."""
        gc.freeze()

    @work(thread=True, group="plan", exit_on_error=False)
    def _load_plan(self) -> None:
        if self.plan_path:
            from harness.demo import load_ready_plan

            if not Path(self.plan_path).exists():
                raise InputError(self.plan_path, None, None, "plan file not found")
            plan = load_ready_plan(self.plan_path, self.results_dir)  # relative demo paths get checkpoints
        else:
            from harness.demo import prepare_demo

            plan = prepare_demo(self.results_dir)
        self.post_message(msg.PlanLoaded(plan, str(self.plan_path or "demo plan")))

    # ---- sections, help, palette -----------------------------------------------------------------------------
    def action_section(self, name: str) -> None:
        if isinstance(self.screen, SectionScreen) and self.screen is not self.get_screen(name):
            first_visit = not self.get_screen(name).is_mounted
            self.switch_screen(name)
            if first_visit:  # a section's widgets are made on its first visit and live on
                self.call_after_refresh(self._settle)

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
            "the plan's checks (flags, drafter against algorithm, shapes); the findings as the CLI prints them",
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
        """Any other way out (an exception, a test ending, App.exit) still stops the servers this TUI started."""
        gc.unfreeze()  # what was frozen for the app's lifetime can be collected again
        if self.tune_proc is not None:  # its process stops the tune's servers on SIGTERM
            self.tune_proc.cancel()
        if self.fleet is not None:
            fleet, self.fleet = self.fleet, None
            with contextlib.suppress(Exception):
                await fleet.close()

    def _mounted(self, name: str) -> Any:
        """The section's screen when it is on display or was (a timer may fire while the app shuts down)."""
        if not self.is_screen_installed(name):
            return None
        screen = self.get_screen(name)
        return screen if screen.is_mounted else None

    # ---- plan -------------------------------------------------------------------------------------------
    @on(msg.PlanLoaded)
    def _plan_loaded(self, m: msg.PlanLoaded) -> None:
        from harness.run.fleet_nodes import server_names

        plan = m.plan
        names = server_names(plan)  # variant@node on a plan with several targets
        self.log_buffers = {n: deque(maxlen=LOG_LINES) for n in names}
        self.servers = {n: ServerView(n) for n in names}
        sim = f"  SIMULATED ({stand_ins(v.engine for v in plan.variants)})" if plan.target.simulated else ""
        suites = ", ".join(s.name for s in plan.suites)
        where = f" ({m.path})" if m.path else ""
        self.plan_line = (
            f"plan {plan.name}{where} on {_hosts(plan)}{sim}   "
            f"{len(plan.variants)} variants   suites: {suites}"
        )
        self.plan = plan
        self.call_after_refresh(self._settle)
        if plan.targets:  # one fleet per node (fleet_factory makes each node's)
            from harness.run.fleet_nodes import NodeFleet

            extra = {"fleet_factory": self.fleet_factory} if self.fleet_factory is not None else {}
            self.fleet = NodeFleet(plan, on_event=self.fleet_feed.push, results_dir=self.results_dir, **extra)
        elif self.fleet_factory is not None:
            self.fleet = self.fleet_factory(plan, on_event=self.fleet_feed.push, results_dir=self.results_dir)
        else:
            from harness.run.fleet import Fleet

            target = self.target_factory() if self.target_factory else None
            self.fleet = Fleet(
                plan, on_event=self.fleet_feed.push, results_dir=self.results_dir, target=target
            )
        self._preflight()
        if hasattr(self.fleet, "adopt"):
            self._adopt()
        self.action_refresh_drafters()

    @work(group="fleet", exit_on_error=False)
    async def _preflight(self) -> None:
        await self.fleet.preflight()

    # ---- servers ------------------------------------------------------------------------------------------
    @on(msg.ServerActionRequested)
    def _server_action(self, m: msg.ServerActionRequested) -> None:
        if self.fleet is None:
            self.notify("the plan is not loaded yet", severity="warning")
        elif self.run_state in ACTIVE_RUN or self.tune_active():
            self.notify("a run or a tune owns the servers now: cancel it first (ctrl+g)", severity="warning")
        else:
            self._fleet_action(m.action, m.variants)

    @work(group="fleet", exit_on_error=False)
    async def _fleet_action(self, action: str, names: tuple[str, ...]) -> None:
        if action == "stop":
            await asyncio.gather(*(self.fleet.stop(n) for n in names))
        else:
            for n in names:  # one at a time: servers on one node compete for GPU memory while loading
                await getattr(self.fleet, action)(n)

    @on(msg.ServerStateChanged)
    def _server_state(self, m: msg.ServerStateChanged) -> None:
        view = self.servers.get(m.variant) or ServerView(m.variant)
        self.servers = {
            **self.servers,
            m.variant: view.with_state(m.state, m.port, m.pgid, m.detail, m.source, self.clock()),
        }
        if m.state == "failed":
            first = m.detail.strip().splitlines()[:1]
            self.notify(f"{m.variant}: server failed" + (f": {first[0]}" if first else ""), severity="error")

    @on(msg.ServerLogLines)
    def _server_log(self, m: msg.ServerLogLines) -> None:
        lines = tuple(clean(ln, one_line=True) for ln in m.lines)  # a server's bytes, shown: no escapes
        self.log_buffers.setdefault(m.variant, deque(maxlen=LOG_LINES)).extend(lines)
        screen = self._mounted("servers")
        if screen is not None:
            screen.append_log(m.variant, lines)

    @on(msg.AlarmRaised)
    def _alarm(self, m: msg.AlarmRaised) -> None:
        alarm = Alarm(m.severity, m.code, m.text)
        if m.variant in self.servers:
            self.servers = {**self.servers, m.variant: self.servers[m.variant].with_alarm(alarm)}
            if m.code in LIVE_ALARMS:  # what happens while servers run: in the Run tab and as a notification
                line = f"{m.severity} {m.variant}: {m.code}: {m.text}"
                if line not in self.live_alarms:
                    self.live_alarms = (*self.live_alarms, line)
                    self.notify(f"{m.variant}: {m.code}: {m.text}", title="alarm", timeout=12,
                                severity="error" if m.severity == "error" else "warning")
        else:  # about the plan or the target as a whole
            self.plan_alarms.append(alarm)
            if m.severity != "info":
                self.notify(f"{m.code}: {m.text}", severity="error" if m.severity == "error" else "warning")

    def _tick(self) -> None:
        """Clocks that move every second: uptimes, a run's elapsed and ETA, a tune's budget. A screen whose
        widgets are already gone (the app closing) is skipped."""
        due = [
            ("servers", any(v.state == "ready" for v in self.servers.values())),
            ("run", self.run_state in ("preparing", "running") and self.progress is not None),
            ("tune", self.tune_state in ("preparing", "running")),
        ]
        for name, moving in due:
            screen = self._mounted(name) if moving else None
            if screen is not None:
                with contextlib.suppress(NoMatches):
                    screen.tick(self.clock())

    def _poll_gpu(self) -> None:
        if self.fleet is not None and any(
            v.state == "ready" and v.source == "fleet" for v in self.servers.values()
        ):
            self._sample_gpu()

    @work(group="gpu", exclusive=True, exit_on_error=False)
    async def _sample_gpu(self) -> None:
        self.post_message(msg.GpuMemorySampled(await self.fleet.gpu_memory()))

    @on(msg.GpuMemorySampled)
    def _gpu(self, m: msg.GpuMemorySampled) -> None:
        changed = {n: v for n, v in self.servers.items() if v.gpu_mib != m.mib.get(n) and v.state == "ready"}
        if changed:
            self.servers = {
                **self.servers,
                **{n: replace(v, gpu_mib=m.mib.get(n)) for n, v in changed.items()},
            }

    # ---- the one error handler ----------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(msg.TaskFailed(event.worker.group, describe(event.worker.error)))

    @on(msg.TaskFailed)
    def _task_failed(self, m: msg.TaskFailed) -> None:
        if m.what == "plan":
            self.plan_line = f"could not load the plan: {m.error}"
        elif m.what == "run":
            self._set_run("failed", f"the run could not start: {m.error}")
        self.notify(m.error, title=f"{m.what} failed", severity="error", timeout=15)


def key_sections() -> KeySections:
    """Every key by where it works, from the classes' BINDINGS: `?` help and the README's table."""
    return [("Everywhere", key_list(DraftbenchApp.BINDINGS) + GENERAL_KEYS)] + [
        (title, key_list(cls.BINDINGS) + cls.HELP_KEYS) for _, title, cls in SECTIONS if cls.BINDINGS
    ]


def _hosts(plan: Any) -> str:
    if not plan.targets:
        return str(plan.target.host)
    from harness.run.multinode import node_name

    return ", ".join(node_name(t) for t in plan.node_targets())


def build_app(
    plan_path: str | None = None, results_dir: str | Path = "results", **kwargs: Any
) -> DraftbenchApp:
    """The one factory: the CLI and the tests build the app the same way, everything through here."""
    return DraftbenchApp(plan_path=plan_path, results_dir=results_dir, **kwargs)


def run_tui(plan_path: str | None, results_dir: str) -> int:
    """`draftbench` / `draftbench tui [PLAN]`: the demo plan when no plan is given."""
    app = build_app(plan_path, results_dir)
    code = app.run()
    return int(code or 0)
