"""Regenerate the README's TUI screenshots (SVG) from the fixed test data: `python docs/screenshots/make.py`.

Same app, data and terminal size as tests/test_tui_snapshots.py, so what the README shows is what the
snapshot tests hold; a screenshot per section plus the help screen.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.tui import messages as msg  # noqa: E402
from harness.tui.app import build_app  # noqa: E402
from harness.tui.state import ProgressSnapshot  # noqa: E402
from tests.snapshots.tui_fakes import (  # noqa: E402
    DRAFTERS,
    RESULTS,
    RUN_A,
    FakeFleet,
    snap_plan,
    wait_for,
)

OUT = Path(__file__).resolve().parent
SIZE = (120, 40)
PROGRESS = ProgressSnapshot(
    done=7,
    total=18,
    variant="good-eagle3",
    phase="snap-suite@c4#r1",
    concurrency=4,
    phase_done=1,
    phase_total=2,
    live_tok_s=412.5,
    accept_len={"baseline": 1.0, "good-eagle3": 2.75},
    gen_tok_s={"baseline": 120.0, "good-eagle3": 260.0},
    accept_series={"good-eagle3": (2.1, 2.4, 2.6, 2.9, 2.7, 2.75, 3.0, 2.8, 2.9, 3.1, 2.95, 2.8)},
    tok_s_series={
        "baseline": (110.0, 118.0, 121.0, 120.0, 119.0, 122.0),
        "good-eagle3": (200.0, 240.0, 255.0, 260.0, 262.0, 258.0),
    },
)


def app_for(section: str):
    return build_app(
        "tests/snapshots/plan.yaml",
        RESULTS,
        plan=snap_plan(),
        fleet_factory=FakeFleet,
        section=section,
        gpu_poll_s=0,
        drafter_dirs=[DRAFTERS],
        clock=lambda: 1000.0,
        theme="textual-dark",
    )


async def shoot(name: str, section: str, prepare) -> None:
    app = app_for(section)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None and len(app.runs) == 2, "plan and runs")
        await prepare(app, pilot)
        await pilot.pause()
        app.save_screenshot(str(OUT / f"{name}.svg"))
    print(f"wrote {OUT / name}.svg")


async def servers(app, pilot) -> None:
    await wait_for(pilot, lambda: app.servers["weak-eagle3"].alarms, "preflight alarm")
    await pilot.press("s")
    await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")


async def run(app, pilot) -> None:
    app.run_state = "running"
    app.run_status = "running: good-eagle3 snap-suite@c4#r1 (2 requests at concurrency 4)"
    app.progress = PROGRESS


async def results(app, pilot) -> None:
    app.post_message(msg.OpenRunRequested(str(RUN_A)))
    await wait_for(pilot, lambda: app.result is not None, "run loaded")


async def retrain(app, pilot) -> None:
    await wait_for(pilot, lambda: len(app.drafters) == 2, "drafters")


async def help_screen(app, pilot) -> None:
    await pilot.press("question_mark")


async def main() -> None:
    for name, section, prepare in (
        ("servers", "servers", servers),
        ("run", "run", run),
        ("results", "results", results),
        ("retrain", "retrain", retrain),
        ("help", "servers", help_screen),
    ):
        await shoot(name, section, prepare)


if __name__ == "__main__":
    asyncio.run(main())
