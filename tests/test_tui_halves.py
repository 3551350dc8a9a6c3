"""The TUI's App composed of halves over its own state: each half a plain object holding the App, its handlers
reached through the App's routes in the halves' order, its workers run on the App under their group."""

from __future__ import annotations

import inspect

from textual.app import App

from harness.tui import messages as msg
from harness.tui.app import DraftbenchApp
from harness.tui.half import Half, handles, work
from tests.snapshots.tui_fakes import Recorder, wait_for
from tests.test_tui_app import SIZE, make_app

HALVES = ("servers_control", "run_control", "results_control", "retrain_control", "tune_control",
          "session_control")
NOBODY_LISTENS = {"PhaseFinished", "PlanFailed"}  # posted (or declared) for the message hook alone


def test_the_app_is_no_mixin_of_its_halves(tmp_path):
    app, _ = make_app(tmp_path)
    assert not any(issubclass(c, Half) for c in DraftbenchApp.__mro__)
    assert [c for c in DraftbenchApp.__mro__ if issubclass(c, App)][1] is App  # its only base is textual's
    for name in HALVES:
        half = getattr(app, name)
        assert isinstance(half, Half) and half.app is app and not isinstance(half, App)


def test_every_message_reaches_its_halves_in_their_order(tmp_path):
    app, _ = make_app(tmp_path)
    routed = app._routes
    everything = {c for _, c in inspect.getmembers(msg, inspect.isclass)
                  if issubclass(c, msg.AppMessage) and c is not msg.AppMessage}
    unhandled = {c.__name__ for c in everything - set(routed)}
    assert unhandled == NOBODY_LISTENS
    # the Servers rows first, then the run's status line: the order the halves are composed in
    assert routed[msg.ServerStateChanged] == [app.servers_control._server_state,
                                              app.run_control._run_server_state]
    assert all(len(handlers) == 1 for m, handlers in routed.items() if m is not msg.ServerStateChanged)


class _Probe(Half):
    """A half of its own: one handler, one worker that fails."""

    def __init__(self, app: DraftbenchApp) -> None:
        super().__init__(app)
        self.noted: list[str] = []

    @handles(msg.RetrainNote)
    def _note(self, m: msg.RetrainNote) -> None:
        self.noted.append(m.text)

    @work(group="probe", thread=True)
    def fail(self) -> None:
        raise ValueError("the probe's worker failed")


async def test_a_half_s_worker_runs_on_the_app_and_its_error_reaches_the_one_handler(tmp_path):
    app, _ = make_app(tmp_path)
    probe = _Probe(app)
    for message, handler in probe.handlers():
        app._routes.setdefault(message, []).append(handler)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        worker = probe.fail()
        assert worker.node is app and worker.group == "probe"
        await wait_for(pilot, lambda: rec.of(msg.TaskFailed), "the worker's failure as TaskFailed")
        assert [(m.what, m.error) for m in rec.of(msg.TaskFailed)] == [("probe", "the probe's worker failed")]
        app.post_message(msg.RetrainNote("routed", True))
        await wait_for(pilot, lambda: probe.noted == ["routed"], "the half's handler called")
        assert app.retrain_note == "routed"  # the retrain half, before it in the routes, handled it too
