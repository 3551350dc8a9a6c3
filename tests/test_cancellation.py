"""A cancelled run stops: a Ctrl-C (or the TUI's cancel) that lands while a server is being stopped ends the
run there. Found by the TUI resume test under load: the cancellation arrived in the baseline server's stop,
a `contextlib.suppress(asyncio.CancelledError)` there ate it, and the run went on to measure the next
variant and wrote itself `complete` while the TUI said `cancelled`. Also: that stop runs to the end (the
server is out of the run's list by then, so a stop cut short would have left it up)."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.common.aio import reap
from harness.inputs.config import load_plan
from harness.targets.local import LocalTarget
from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    live_groups,
    prompts,
    read_csv,
    reap_servers,
    sim_env,
    write_plan,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


class CancelAtStop(LocalTarget):
    """Cancels `victim` at the first server stop: as the stop begins, or once the group is gone (the run is
    then in the stop's cleanup: the log follower's last lines)."""

    def __init__(self, when: str) -> None:
        super().__init__()
        self.when = when
        self.victim: asyncio.Task | None = None
        self.killed: list[tuple[int, bool]] = []

    async def kill_group(self, pgid: int, *, term_timeout: float = 15.0) -> bool:
        first = not self.killed
        if first and self.when == "before-kill":
            assert self.victim is not None
            self.victim.cancel()
            await asyncio.sleep(0)  # the cancellation reaches the run while this stop is under way
        gone = await super().kill_group(pgid, term_timeout=term_timeout)
        self.killed.append((pgid, gone))
        if first and self.when == "after-kill":
            assert self.victim is not None
            asyncio.get_running_loop().call_soon(self.victim.cancel)
        return gone


@pytest.mark.parametrize("when", ["before-kill", "after-kill"])
async def test_a_cancel_during_a_server_stop_ends_the_run(tmp_path: Path, when: str):
    plan = load_plan(write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                                env=sim_env(0.3), variants=[{"name": "baseline"}, GOOD],
                                suite_prompts=prompts(3), run={"concurrency": [1], "max_tokens": 16}))
    target = CancelAtStop(when)
    seen: list[object] = []

    async def consume() -> None:
        async for event in run_plan(plan, results_dir=tmp_path / "results", target=target):
            seen.append(event)

    task = asyncio.create_task(consume())
    target.victim = task
    with pytest.raises(asyncio.CancelledError):
        await task
    run_dir = next((tmp_path / "results").iterdir())
    # the run stopped where it was cancelled: the baseline measured, the drafter never started
    assert {r["variant"] for r in read_csv(run_dir / "phases.csv")} == {"baseline"}
    variants = [json.loads(line)["variant"] for line in (run_dir / "variants.jsonl").read_text().splitlines()]
    assert "good" not in variants
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "incomplete"
    # the baseline's stop ran to its end: its group is gone
    assert len(target.killed) == 1 and target.killed[0][1] is True
    assert target.killed[0][0] not in live_groups()
    stopped = [e for e in seen if type(e).__name__ == "ServerState" and getattr(e, "state", "") == "stopped"]
    assert len(stopped) <= 1  # no second server was ever started, let alone stopped


async def test_reap_takes_the_tasks_outcomes_and_passes_the_callers_cancellation_on():
    async def fails() -> None:
        raise ValueError("a follower's lost link")

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.05)  # a cancelled task that takes a moment to end

    failing = asyncio.create_task(fails())
    await reap(failing)  # its ValueError is taken, not raised (and not left unretrieved)
    assert failing.done() and isinstance(failing.exception(), ValueError)

    lingering = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    lingering.cancel()

    async def caller() -> str:
        await reap(lingering)
        return "went on"  # what a swallowed cancellation looks like

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0.01)
    outer.cancel()  # the caller is cancelled while it waits
    with pytest.raises(asyncio.CancelledError):
        await outer
    await reap(lingering)
    assert lingering.cancelled()


async def test_reap_waits_at_most_its_timeout():
    never = asyncio.create_task(asyncio.sleep(3600))
    await reap(never, timeout=0.01)
    assert not never.done()
    never.cancel()
    await reap(never)
    assert never.cancelled()


def test_no_module_suppresses_a_cancellation():
    """`contextlib.suppress(asyncio.CancelledError)` eats the caller's own cancellation along with the awaited
    task's: harness.common.aio.reap or finish instead."""
    found = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "suppress" and any(
                    isinstance(a, ast.Attribute) and a.attr == "CancelledError" for a in node.args):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
