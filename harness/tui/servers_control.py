"""The App's servers half: the plan loaded and the Servers section's fleet made for it (one per node of a plan
with several targets), the fleet's servers started and stopped on request, their states, log lines, alarms
and GPU memory as the Servers section shows them."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import replace

from harness.analysis.engines_table import stand_ins
from harness.common.terminal import clean
from harness.inputs.config import Plan
from harness.serve.nodes import node_name
from harness.tui import messages as msg
from harness.tui.half import Half, handles, work
from harness.tui.run_control import ACTIVE_RUN
from harness.tui.state import Alarm, ServerView
from harness.tui.widgets.log_pane import LOG_LINES

LIVE_ALARMS = ("drafter-inert", "cuda-graph-off", "slower-than-baseline")


class ServersControl(Half):
    @handles(msg.PlanLoaded)
    def plan_loaded(self, m: msg.PlanLoaded) -> None:
        # the fleets load the engines (aiohttp, ~150 ms): imported with the plan, not at the TUI's start
        from harness.serve.fleet import Fleet
        from harness.serve.fleet_nodes import NodeFleet, server_names

        app = self.app
        plan = m.plan
        names = server_names(plan)  # variant@node on a plan with several targets
        app.log_buffers = {n: deque(maxlen=LOG_LINES) for n in names}
        app.servers = {n: ServerView(n) for n in names}
        sim = f"  SIMULATED ({stand_ins(v.engine for v in plan.variants)})" if plan.target.simulated else ""
        suites = ", ".join(s.name for s in plan.suites)
        where = f" ({m.path})" if m.path else ""
        app.plan_line = (
            f"plan {plan.name}{where} on {_hosts(plan)}{sim}   "
            f"{len(plan.variants)} variants   suites: {suites}"
        )
        app.plan = plan
        app.call_after_refresh(app.settle)
        if plan.targets:  # one fleet per node (fleet_factory makes each node's)
            extra = {"fleet_factory": app.fleet_factory} if app.fleet_factory is not None else {}
            app.fleet = NodeFleet(plan, on_event=app.fleet_feed.push, results_dir=app.results_dir, **extra)
        elif app.fleet_factory is not None:
            app.fleet = app.fleet_factory(plan, on_event=app.fleet_feed.push, results_dir=app.results_dir)
        else:
            target = app.target_factory() if app.target_factory else None
            app.fleet = Fleet(plan, on_event=app.fleet_feed.push, results_dir=app.results_dir, target=target)
        self._preflight()
        app.session_control.adopt()
        app.results_control.refresh_drafters()

    @work(group="fleet")
    async def _preflight(self) -> None:
        await self.app.fleet.preflight()

    @handles(msg.ServerActionRequested)
    def _server_action(self, m: msg.ServerActionRequested) -> None:
        app = self.app
        if app.fleet is None:
            app.notify("the plan is not loaded yet", severity="warning")
        elif app.run_state in ACTIVE_RUN or app.tune_control.active():
            app.notify("a run or a tune owns the servers now: cancel it first (ctrl+g)", severity="warning")
        else:
            self._fleet_action(m.action, m.variants)

    @work(group="fleet")
    async def _fleet_action(self, action: str, names: tuple[str, ...]) -> None:
        fleet = self.app.fleet
        if action == "stop":
            await asyncio.gather(*(fleet.stop(n) for n in names))
        else:
            for n in names:  # one at a time: servers on one node compete for GPU memory while loading
                await getattr(fleet, action)(n)

    @handles(msg.ServerStateChanged)
    def _server_state(self, m: msg.ServerStateChanged) -> None:
        app = self.app
        view = app.servers.get(m.variant) or ServerView(m.variant)
        app.servers = {
            **app.servers,
            m.variant: view.with_state(m.state, m.port, m.pgid, m.detail, m.source, app.clock()),
        }
        if m.state == "failed":
            first = m.detail.strip().splitlines()[:1]
            app.notify(f"{m.variant}: server failed" + (f": {first[0]}" if first else ""), severity="error")

    @handles(msg.ServerLogLines)
    def _server_log(self, m: msg.ServerLogLines) -> None:
        lines = tuple(clean(ln, one_line=True) for ln in m.lines)  # a server's bytes, shown: no escapes
        self.app.log_buffers.setdefault(m.variant, deque(maxlen=LOG_LINES)).extend(lines)
        screen = self.app.mounted("servers")
        if screen is not None:
            screen.append_log(m.variant, lines)

    @handles(msg.AlarmRaised)
    def _alarm(self, m: msg.AlarmRaised) -> None:
        app = self.app
        alarm = Alarm(m.severity, m.code, m.text)
        if m.variant in app.servers:
            app.servers = {**app.servers, m.variant: app.servers[m.variant].with_alarm(alarm)}
            if m.code in LIVE_ALARMS:  # what happens while servers run: in the Run tab and as a notification
                line = f"{m.severity} {m.variant}: {m.code}: {m.text}"
                if line not in app.live_alarms:
                    app.live_alarms = (*app.live_alarms, line)
                    app.notify(f"{m.variant}: {m.code}: {m.text}", title="alarm", timeout=12,
                               severity="error" if m.severity == "error" else "warning")
        else:  # about the plan or the target as a whole
            app.plan_alarms.append(alarm)
            if m.severity != "info":
                app.notify(f"{m.code}: {m.text}", severity="error" if m.severity == "error" else "warning")

    def poll_gpu(self) -> None:
        if self.app.fleet is not None and any(
            v.state == "ready" and v.source == "fleet" for v in self.app.servers.values()
        ):
            self._sample_gpu()

    @work(group="gpu", exclusive=True)
    async def _sample_gpu(self) -> None:
        self.app.post_message(msg.GpuMemorySampled(await self.app.fleet.gpu_memory()))

    @handles(msg.GpuMemorySampled)
    def _gpu(self, m: msg.GpuMemorySampled) -> None:
        app = self.app
        changed = {n: v for n, v in app.servers.items() if v.gpu_mib != m.mib.get(n) and v.state == "ready"}
        if changed:
            app.servers = {
                **app.servers,
                **{n: replace(v, gpu_mib=m.mib.get(n)) for n, v in changed.items()},
            }


def _hosts(plan: Plan) -> str:
    if not plan.targets:
        return str(plan.target.host)
    return ", ".join(node_name(t) for t in plan.node_targets())
