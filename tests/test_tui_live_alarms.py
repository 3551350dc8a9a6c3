"""Live alarms fire for servers the Servers section started (not only in runs) and show in the Run tab and
as notifications."""

from __future__ import annotations

import asyncio

import aiohttp

from harness.analysis.live_speed import LiveSpeed
from harness.common import events as ev
from harness.serve.fleet import Fleet
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.snapshots.tui_fakes import DRAFTERS, PLAN_PATH, FakeFleet, Recorder, snap_plan, wait_for
from tests.test_tui_fleet import Events, demo_plan, wait_until


async def _chat(url: str, model: str, n: int) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "count to fifty"}], "max_tokens": 96}
    async with aiohttp.ClientSession() as s:
        async def one() -> None:
            async with s.post(f"{url}/v1/chat/completions", json=body) as r:
                await r.read()
        await asyncio.gather(*(one() for _ in range(n)))


async def test_an_inert_drafter_in_the_servers_section_raises_the_alarm(tmp_path):
    events = Events()
    plan = demo_plan(tmp_path)
    fleet = Fleet(plan, on_event=events, results_dir=tmp_path / "results")
    try:
        assert (await fleet.start("wrong-flag-eagle")).state == "ready"
        url = fleet.base_url("wrong-flag-eagle")
        for _ in range(10):
            if any(isinstance(e, ev.Alarm) and e.code == "drafter-inert" for e in events.all):
                break
            await _chat(url, plan.model.served_model_name, 4)
        await wait_until(lambda: any(isinstance(e, ev.Alarm) and e.code == "drafter-inert"
                                     for e in events.all),
                         "drafter-inert from the Servers section's server")
        alarm = next(e for e in events.all if isinstance(e, ev.Alarm) and e.code == "drafter-inert")
        assert alarm.variant == "wrong-flag-eagle" and alarm.severity == "error"
    finally:
        await fleet.close()


def test_slower_than_baseline_from_the_servers_windows():
    class W:
        def __init__(self, tok_s, batch=4):
            self.kind, self.gen_throughput, self.running_req = "decode", tok_s, batch

    speed = LiveSpeed("baseline", min_windows=3)
    out = []
    for _ in range(3):
        out += speed.feed("baseline", W(100.0))
        out += speed.feed("fast", W(180.0))
        out += speed.feed("slow", W(70.0))
        out += speed.feed("slow", W(75.0, batch=8))  # no baseline at batch 8: nothing to compare
    assert [(a.variant, a.code) for a in out] == [("slow", "slower-than-baseline")]
    assert "70 tok/s vs the baseline's 100 at batch 4" in out[0].message
    assert speed.feed("slow", W(70.0)) == []  # once per variant and batch


class AlarmingFleet(FakeFleet):
    async def start(self, name: str) -> None:
        await super().start(name)
        self.on_event(ev.Alarm(name, "error", "drafter-inert", "accept len 1.00 for 3 windows in a row"))


async def test_live_alarms_show_in_the_run_tab_and_as_notifications(tmp_path):
    def factory(plan, *, on_event, results_dir):
        return AlarmingFleet(plan, on_event=on_event, results_dir=results_dir, alarms=False)

    app = build_app(str(PLAN_PATH), tmp_path / "results", plan=snap_plan(), fleet_factory=factory,
                    gpu_poll_s=0, drafter_dirs=[DRAFTERS], flush_interval=0.05)
    rec = Recorder()
    async with app.run_test(size=(120, 40), message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.live_alarms, "the alarm listed")
        assert app.live_alarms == ("error baseline: drafter-inert: accept len 1.00 for 3 windows in a row",)
        assert any("drafter-inert" in n.message for n in app._notifications)
        await pilot.press("2")
        shown = app.screen.query_one("#run-alarms")
        assert shown.display and "baseline: drafter-inert" in str(shown.render())
    assert [m.code for m in rec.of(msg.AlarmRaised)] == ["drafter-inert"]
