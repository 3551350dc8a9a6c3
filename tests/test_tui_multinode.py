"""A plan with several targets in the TUI: the run goes through run_multi (two loopback sshd nodes), the Run
tab shows every node's state, Results name each row's node, and the Servers section starts and stops a
variant's server on one chosen node."""

from __future__ import annotations

import pytest

from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.snapshots.tui_fakes import wait_for
from tests.test_multinode import _plan, ssh, two_nodes  # noqa: F401 (the fixture, used by name)

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
SIZE = (120, 40)
POLL_S = 0.2  # the stand-ins share the CPU with the UI


def _two_variant_plan(tmp_path):
    """The multinode plan without wrong-flag: good on node-a, weak on node-b, each with its baseline."""
    path = _plan(tmp_path, "[node-a, node-b]")
    text = path.read_text()
    start = text.index("  - name: wrong-flag")
    path.write_text(text[:start] + text[text.index("suites:"):])
    assert "wrong-flag" not in path.read_text()
    return path


@ssh
@pytest.mark.usefixtures("two_nodes")
async def test_a_two_node_plan_runs_per_node_and_serves_per_node(tmp_path):
    path = _two_variant_plan(tmp_path)
    app = build_app(str(path), tmp_path / "results", section="run", gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "the plan", 30)
        assert set(app.servers) \
            == {f"{v}@{n}" for v in ("baseline", "good", "weak") for n in ("node-a", "node-b")}
        assert "node-a, node-b" in app.plan_line
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state in ("done", "failed", "cancelled"), "the run's end", 300,
                       POLL_S)
        assert app.run_state == "done", app.run_status
        # every node's state, with its variants, as the Run tab shows it
        assert app.nodes == {"node-a": ("done", ("baseline", "good"), ""),
                             "node-b": ("done", ("baseline", "weak"), "")}
        shown = str(app.screen.query_one("#run-nodes").render())
        assert "node-a  done: baseline, good" in shown and "node-b  done: baseline, weak" in shown
        assert {"baseline@node-a", "good@node-a", "baseline@node-b", "weak@node-b"} <= set(app.run_variants)
        # Results: the merged summary, each row named by its node
        await wait_for(pilot, lambda: app.result is not None and "node" in app.result.summary, "the results",
                       30)
        await pilot.press("3")
        table = app.screen.query_one("#results-table")
        keys = {k.value for k in table.rows}
        assert {"baseline@node-a@2", "good@node-a@2", "baseline@node-b@2", "weak@node-b@2"} == keys
        assert table.get_cell("weak@node-b@2", "variant").plain.lstrip("*!") == "weak@node-b"

        # Servers: start good on node-b only, then stop it there
        await pilot.press("1")
        app.post_message(msg.ServerActionRequested("start", ("good@node-b",)))
        await wait_for(pilot, lambda: app.servers["good@node-b"].state in ("ready", "failed"),
                       "good@node-b up", 90, POLL_S)
        assert app.servers["good@node-b"].state == "ready", app.servers["good@node-b"].detail
        assert app.servers["good@node-a"].state == "stopped"
        node_b = app.fleet.fleets["node-b"]
        assert node_b.status("good").state == "ready" and app.fleet.fleets["node-a"].live() == []
        assert await node_b.target.alive(app.servers["good@node-b"].pgid)
        assert app.screen.query_one("#server-table").get_cell("good@node-b", "port") == str(
            app.servers["good@node-b"].port)
        pgid = app.servers["good@node-b"].pgid
        app.post_message(msg.ServerActionRequested("stop", ("good@node-b",)))
        await wait_for(pilot, lambda: app.servers["good@node-b"].state == "stopped", "good@node-b stopped",
                       60, POLL_S)
        assert app.fleet.live() == [] and not await node_b.target.alive(pgid)
