"""Open-loop load: requests arrive on a seeded schedule at a given rate, as sglang.bench_serving and vLLM's
`bench serve` send them (Poisson, or gamma with a burstiness), whatever the server's state."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from harness.client.collect import StreamResult
    from harness.client.stream import ReplayClient, ReplayRequest
    from harness.inputs.config import Plan
    from harness.inputs.suites import Prompt, Suite

P = TypeVar("P")  # what a schedule starts: a prompt (a conversation)
T = TypeVar("T")  # what it yields: a finished turn


def rate_label(rate: float) -> str:
    """8 -> "8", 0.5 -> "0.5", inf -> "inf": the phase id part after "@r"."""
    if math.isinf(rate):
        return "inf"
    return f"{rate:g}"


def load_label(phase: str, concurrency: int) -> str:
    """How a phase loads the server, for a progress line: "at concurrency 8", or "at 4 req/s (open loop)"
    for a request-rate phase (`<suite>@r<rate>#r<repeat>`, concurrency 0)."""
    if not concurrency and "@r" in phase:
        return f"at {phase.rsplit('@r', 1)[1].split('#')[0]} req/s (open loop)"
    return f"at concurrency {concurrency}"


def arrival_offsets(n: int, rate: float, *, burstiness: float = 1.0, seed: str | int = 1) -> list[float]:
    """Seconds from the phase start at which each of `n` requests is sent. The first goes at 0 and each gap
    is gamma(shape=burstiness, mean=1/rate) (exponential, i.e. Poisson arrivals, at burstiness 1), as in
    bench_serving; rate inf sends all at once. The same seed gives the same schedule for every variant."""
    if n <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(str(seed))
    out = [0.0]
    for _ in range(n - 1):
        out.append(out[-1] + rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
    return out


async def replay_at_rate(prompts: list[P], offsets: list[float],
                         run_one: Callable[[P], AsyncIterator[T]], *,
                         stop: asyncio.Event | None = None, clock: Callable[[], float] | None = None,
                         sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> AsyncIterator[T]:
    """Start `run_one(prompt)` (an async iterator of finished turns) for each prompt at its offset, never
    waiting for earlier ones; yield every item as it finishes. A conversation's later turns follow its own
    answers at once. `stop` set: no more arrivals; those in flight finish."""
    loop = asyncio.get_running_loop()
    now = clock or loop.time
    t0 = now()
    done: asyncio.Queue[Any] = asyncio.Queue()
    sentinel = object()

    async def one(prompt: P, at: float) -> None:
        try:
            delay = t0 + at - now()
            if delay > 0:
                await sleep(delay)
            if stop is not None and stop.is_set():
                return
            async for item in run_one(prompt):
                await done.put(item)
        finally:
            await done.put(sentinel)

    tasks = [asyncio.create_task(one(p, at)) for p, at in zip(prompts, offsets, strict=True)]
    left = len(tasks)
    try:
        while left:
            item = await done.get()
            if item is sentinel:
                left -= 1
                continue
            yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def max_connections(plan: Plan) -> int:
    """The client's connection cap: the highest concurrency, or every prompt of the largest suite when a
    request-rate phase may have them all in flight (a cap would queue arrivals inside the client)."""
    widest = max(plan.run.concurrency, default=1)
    if plan.run.request_rate:
        widest = max(widest, max(len(s.prompts) for s in plan.suites))
    return widest + 8


async def replay_rate_phase(client: ReplayClient, plan: Plan, prompts: list[Prompt], suite: Suite,
                            rate: float, extra: dict | None, phase: str
                            ) -> AsyncIterator[tuple[ReplayRequest, Prompt, StreamResult]]:
    """Open loop: conversation i starts at its seeded arrival time (seed: run.seed and the phase id, the
    same for every variant); yields (request, prompt, result) per turn as each finishes."""
    from harness.bench.conversation import converse
    from harness.bench.replay import send, to_request

    offsets = arrival_offsets(len(prompts), rate, burstiness=float(plan.run.burstiness),
                              seed=f"{plan.run.seed}/{phase}")
    retries = int(plan.run.retries)

    async def conversation(prompt: Prompt) -> AsyncIterator[tuple[ReplayRequest, Prompt, StreamResult]]:
        first = to_request(prompt, suite, plan, extra)
        async for req, result in converse(first, prompt, suite, lambda r: send(client, r, retries)):
            yield req, prompt, result

    async for item in replay_at_rate(prompts, offsets, conversation):
        yield item
