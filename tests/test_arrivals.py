"""Request-rate arrivals: a seeded schedule (Poisson or gamma), and the open loop that keeps to it."""

from __future__ import annotations

import asyncio
import heapq
import math
import statistics

import pytest

from harness.bench.arrivals import arrival_offsets, rate_label, replay_at_rate


def test_the_schedule_is_seeded_and_the_same_for_every_variant():
    a = arrival_offsets(50, 8.0, seed="1/s@r8#r1")
    assert a == arrival_offsets(50, 8.0, seed="1/s@r8#r1")
    assert a != arrival_offsets(50, 8.0, seed="1/s@r8#r2")
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:], strict=False))


def test_gaps_have_the_rate_and_burstiness_asked_for():
    n = 20000
    for burstiness in (1.0, 0.25, 4.0):
        offsets = arrival_offsets(n, 10.0, burstiness=burstiness)
        gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
        mean, cv = statistics.fmean(gaps), statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert abs(mean - 0.1) < 0.01
        assert abs(cv - 1 / math.sqrt(burstiness)) < 0.1  # gamma: cv = 1/sqrt(shape); Poisson cv = 1


def test_infinite_rate_sends_everything_at_once():
    assert arrival_offsets(4, math.inf) == [0.0] * 4
    assert [rate_label(r) for r in (8.0, 0.5, math.inf)] == ["8", "0.5", "inf"]


class FakeTime:
    """A virtual clock: sleepers wake in order of their wake time, and time jumps to it exactly."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleepers: list[tuple[float, int, asyncio.Future]] = []
        self.done = False

    async def sleep(self, delay: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self.sleepers, (self.now + delay, len(self.sleepers) + id(fut), fut))
        await fut

    async def drive(self) -> None:
        while not self.done:
            for _ in range(5):  # let every runnable task reach its next sleep
                await asyncio.sleep(0)
            if self.sleepers:
                wake, _, fut = heapq.heappop(self.sleepers)
                self.now = wake
                fut.set_result(None)


async def test_the_open_loop_starts_each_request_at_its_offset():
    clock = FakeTime()
    starts: dict[str, float] = {}

    async def run_one(prompt: str):
        starts[prompt] = clock.now - 100.0
        yield prompt

    prompts = [f"p{i}" for i in range(6)]
    offsets = arrival_offsets(6, 4.0, seed=7)

    async def consume() -> list[str]:
        try:
            return [x async for x in replay_at_rate(prompts, offsets, run_one, clock=lambda: clock.now,
                                                    sleep=clock.sleep)]
        finally:
            clock.done = True

    got, _ = await asyncio.gather(consume(), clock.drive())
    assert sorted(got) == prompts
    # every request at its scheduled time, none waits for another
    assert [starts[p] for p in prompts] == pytest.approx(offsets, abs=1e-9)


def test_progress_lines_name_a_rate_phase_by_its_rate():
    from harness.bench.arrivals import load_label

    assert load_label("s@c8#r1", 8) == "at concurrency 8"
    assert load_label("s@r4#r1", 0) == "at 4 req/s (open loop)"
    assert load_label("mt@bench@r0.5#r2", 0) == "at 0.5 req/s (open loop)"  # a suite name with an @ in it
    assert load_label("s@rinf#r1", 0) == "at inf req/s (open loop)"
