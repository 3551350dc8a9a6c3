"""drain(): events in order, crashes re-raised, and closing the consumer runs the producer's cleanup."""

import asyncio
import contextlib

import pytest

from harness.common.aio import drain


async def test_events_in_order_and_crash_reraised():
    async def producer(emit):
        for i in range(3):
            emit(i)
            await asyncio.sleep(0)
        raise RuntimeError("boom")

    seen = []
    with pytest.raises(RuntimeError, match="boom"):
        async for e in drain(producer, name="t"):
            seen.append(e)
    assert seen == [0, 1, 2]


async def test_closing_a_wrapping_generator_runs_the_cleanup():
    cleaned = asyncio.Event()

    async def producer(emit):
        try:
            emit("ready")
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # cleanup that itself awaits (stopping servers does)
            cleaned.set()

    async def wrapper():  # the runner's shape: a generator over drain()
        async with contextlib.aclosing(drain(producer, name="t")) as events:
            async for e in events:
                yield e

    gen = wrapper()
    assert await gen.__anext__() == "ready"
    await gen.aclose()
    assert cleaned.is_set()  # done before aclose() returned, not later by the garbage collector
