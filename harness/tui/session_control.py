"""The App's session half: asking before destructive keys, quitting (what it stops, keep or stop the servers),
servers an earlier draftbench left running (adopted on start), and `draftbench check` from the palette."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from textual import on, work
from textual.app import App

from harness.tui import messages as msg
from harness.tui.run_control import ACTIVE_RUN


class SessionControl(App[int]):
    # set by the App and its other halves
    fleet: Any
    servers: Any
    clock: Callable[[], float]
    run_thread: Any
    run_dir: str | None
    tune_active: Callable[[], bool]
    stop_tune: Callable[[], Any]
    tune_dir: Any

    def confirm(self, question: str, answers: list[tuple[str, str]], then: Callable[[str], Any]) -> None:
        """Ask before a destructive key acts; `then(answer)` runs only on an answer, not on Cancel."""
        from harness.tui.dialogs import ConfirmDialog

        def done(answer: str | None) -> None:
            if answer is None:
                return
            if asyncio.iscoroutinefunction(then):
                self.run_worker(then(answer), group="confirm", exit_on_error=False)
            else:
                then(answer)

        self.push_screen(ConfirmDialog(question, answers), done)

    def _live_servers(self) -> list[str]:
        live = getattr(self.fleet, "live", None)
        if live is not None:
            return list(live())
        return [n for n, v in self.servers.items() if v.source == "fleet" and v.state in ("starting", "ready")]

    async def action_quit(self) -> None:
        """Leave at once when nothing runs; else say what quitting stops and ask (stop, keep servers, cancel)."""
        running = self.run_thread is not None and self.run_state in ACTIVE_RUN
        live = self._live_servers() if self.fleet is not None else []
        if not running and not live and not self.tune_active():
            await self._quit("stop")
            return
        what = [f"the run {self.run_dir or ''} (cancelled; finished requests kept, resumable)"] if running else []
        if self.tune_active():
            what.append(f"the tune {self.tune_dir or ''} (cancelled; measurements kept, resumable)")
        what += [f"server {n}" + (f" on port {self.servers[n].port}" if n in self.servers and self.servers[n].port
                                  else "") for n in live]
        answers = [("stop", "Stop and quit")] + ([("keep", "Keep servers, quit")] if live and not running else [])
        self.confirm("Quitting stops:\n  " + "\n  ".join(what), answers, self._quit)

    async def _quit(self, answer: str) -> None:
        if self.run_thread is not None and self.run_state in ACTIVE_RUN:
            self.notify("cancelling the run and stopping its servers...")
            self.run_thread.cancel()
            await self.workers.wait_for_complete([w for w in self.workers if w.group == "run"])
        await self.stop_tune()
        if self.fleet is not None:
            live = self._live_servers()
            fleet, self.fleet = self.fleet, None
            if answer == "keep":
                self.notify(f"leaving {len(live)} server(s) running: the next draftbench adopts them")
            elif live:
                self.notify("stopping " + ", ".join(live) + "...")
            await fleet.close(keep=answer == "keep")
        self.exit(0)

    def action_preflight(self) -> None:
        if self.fleet is None or not hasattr(self.fleet, "check"):
            self.notify("the plan is not loaded yet", severity="warning")
            return
        self.notify("running draftbench check...")
        self._check_plan()

    @work(group="check", exclusive=True, exit_on_error=False)
    async def _check_plan(self) -> None:
        from harness.checks import has_errors, render_findings

        found = await self.fleet.check()
        errors = sum(1 for f in found if getattr(f, "severity", "") == "error")
        self.post_message(msg.PreflightReported(render_findings(found), errors if has_errors(found) else 0,
                                                tuple(found)))

    @on(msg.PreflightReported)
    def _preflight_reported(self, m: msg.PreflightReported) -> None:
        from harness.tui.dialogs import FindingsScreen

        head = f"draftbench check: {m.errors} error(s)" if m.errors else "draftbench check: no errors"
        self.push_screen(FindingsScreen(head + " (esc closes)", m.findings))

    @work(group="fleet", exit_on_error=False)
    async def _adopt(self) -> None:
        """Servers an earlier draftbench left running for this plan: shown, stoppable, asked about on quit."""
        adopted = await self.fleet.adopt()
        if adopted:
            # after their ServerStateChanged (posted as they were adopted): the uptime counts from their start
            self.post_message(msg.ServersAdopted({n: self.fleet.uptime(n) or 0.0 for n in adopted}))
            self.notify(f"adopted {len(adopted)} server(s) left running: {', '.join(adopted)}", timeout=10)

    @on(msg.ServersAdopted)
    def _servers_adopted(self, m: msg.ServersAdopted) -> None:
        now = self.clock()
        self.servers = {n: replace(v, ready_since=now - m.uptimes[n]) if n in m.uptimes and v.state == "ready"
                        else v for n, v in self.servers.items()}
