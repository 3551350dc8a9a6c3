"""harness.common.aio.finish: cleanup that a cancellation cannot cut short (a run's server stops)."""

import asyncio

from harness.common.aio import finish


async def test_a_cancellation_during_cleanup_waits_for_it_and_is_reported():
    stopped = []
    gate = asyncio.Event()

    async def stop_servers():
        await gate.wait()  # a server's SIGTERM and its ~5 s shutdown
        stopped.append("all")

    async def run():
        try:
            await asyncio.sleep(3600)
        finally:
            if await finish(stop_servers()):
                raise asyncio.CancelledError

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    task.cancel()  # the first cancellation: the run ends and its cleanup begins
    await asyncio.sleep(0)
    task.cancel()  # a second one in the middle of the cleanup (a generator closed again, a second Ctrl-C)
    await asyncio.sleep(0)
    assert not task.done() and stopped == []  # the cleanup is still running
    gate.set()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert stopped == ["all"] and task.cancelled()


async def test_no_cancellation_returns_false():
    async def work():
        return 1

    assert await finish(work()) is False
