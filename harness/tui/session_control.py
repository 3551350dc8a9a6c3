"""The App's session half: asking before destructive keys, quitting (what it stops, keep or stop the servers),
servers an earlier draftbench left running (adopted on start), and `draftbench check` from the palette."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.tui import messages as msg
from harness.tui.dialogs import ConfirmDialog, FindingsScreen
from harness.tui.half import Half, handles, work
from harness.tui.run_control import ACTIVE_RUN


class SessionControl(Half):
    def confirm(self, question: str, answers: list[tuple[str, str]], then: Callable[[str], Any]) -> None:
        """Ask before a destructive key acts; `then(answer)` runs only on an answer, not on Cancel."""
        def done(answer: str | None) -> None:
            if answer is None:
                return
            if asyncio.iscoroutinefunction(then):
                self.app.run_worker(then(answer), group="confirm", exit_on_error=False)
            else:
                then(answer)

        self.app.push_screen(ConfirmDialog(question, answers), done)

    def _live_servers(self) -> list[str]:
        if self.app.fleet is not None:
            return list(self.app.fleet.live())
        return [n for n, v in self.app.servers.items() if v.source == "fleet" and v.state in ("starting",
                                                                                              "ready")]

    async def quit(self) -> None:
        """Leave at once when nothing runs; else say what quitting stops and ask (stop, keep servers,
        cancel)."""
        app, tune = self.app, self.app.tune_control
        running = app.run_thread is not None and app.run_state in ACTIVE_RUN
        live = self._live_servers() if app.fleet is not None else []
        if not running and not live and not tune.active():
            await self._quit("stop")
            return
        what = [f"the run {app.run_dir or ''} (cancelled; finished requests kept, resumable)"] \
            if running else []
        if tune.active():
            what.append(f"the tune {app.tune_dir or ''} (cancelled; measurements kept, resumable)")
        what += [f"server {n}"
                 + (f" on port {app.servers[n].port}" if n in app.servers and app.servers[n].port else "")
                 for n in live]
        answers = [("stop", "Stop and quit")] \
            + ([("keep", "Keep servers, quit")] if live and not running else [])
        self.confirm("Quitting stops:\n  " + "\n  ".join(what), answers, self._quit)

    async def _quit(self, answer: str) -> None:
        app = self.app
        if app.run_thread is not None and app.run_state in ACTIVE_RUN:
            app.notify("cancelling the run and stopping its servers...")
            app.run_thread.cancel()
            await app.workers.wait_for_complete([w for w in app.workers if w.group == "run"])
        await app.tune_control.stop_tune()
        if app.fleet is not None:
            live = self._live_servers()
            fleet, app.fleet = app.fleet, None
            if answer == "keep":
                app.notify(f"leaving {len(live)} server(s) running: the next draftbench adopts them")
            elif live:
                app.notify("stopping " + ", ".join(live) + "...")
            await fleet.close(keep=answer == "keep")
        app.exit(0)

    def preflight(self) -> None:
        if self.app.fleet is None:
            self.app.notify("the plan is not loaded yet", severity="warning")
            return
        self.app.notify("running draftbench check...")
        self._check_plan()

    @work(group="check", exclusive=True)
    async def _check_plan(self) -> None:
        from harness.checks import has_errors, render_findings  # when asked: the TUI starts without them

        found = await self.app.fleet.check()
        errors = sum(1 for f in found if f.severity == "error")
        self.app.post_message(msg.PreflightReported(render_findings(found),
                                                    errors if has_errors(found) else 0, tuple(found)))

    @handles(msg.PreflightReported)
    def _preflight_reported(self, m: msg.PreflightReported) -> None:
        head = f"draftbench check: {m.errors} error(s)" if m.errors else "draftbench check: no errors"
        self.app.push_screen(FindingsScreen(head + " (esc closes)", m.findings))

    @work(group="fleet")
    async def adopt(self) -> None:
        """Servers an earlier draftbench left running for this plan: shown, stoppable, asked about on quit."""
        fleet = self.app.fleet
        adopted = await fleet.adopt()
        if adopted:
            # after their ServerStateChanged (posted as they were adopted): the uptime counts from their start
            self.app.post_message(msg.ServersAdopted({n: fleet.uptime(n) or 0.0 for n in adopted}))
            self.app.notify(f"adopted {len(adopted)} server(s) left running: {', '.join(adopted)}",
                            timeout=10)

    @handles(msg.ServersAdopted)
    def _servers_adopted(self, m: msg.ServersAdopted) -> None:
        app = self.app
        now = app.clock()
        app.servers = {n: replace(v, ready_since=now - m.uptimes[n]) if n in m.uptimes and v.state == "ready"
                       else v for n, v in app.servers.items()}
