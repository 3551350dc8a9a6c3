"""Replaying a suite against one server: closed-loop concurrency, warmup, and the per-request spec probe."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.store import CsvAppender
from harness.bench.conversation import converse
from harness.bench.sizing import Sizer, pass_suffix
from harness.common.aio import reap

if TYPE_CHECKING:  # the client's module imports the openai SDK (~1 s): at run time only where it sends
    from harness.client.collect import StreamResult
    from harness.client.stream import ReplayClient, ReplayRequest
    from harness.inputs.config import Plan, Variant
    from harness.inputs.suites import Prompt, Suite

PROBE_COLUMNS = ["variant", "phase", "request_id", "spec_verify_ct", "completion_tokens",
                 "spec_correct_drafts", "spec_proposed_drafts", "spec_accept_len", "spec_histogram"]
WATCHDOG_S = 1.0  # a killed server is noticed within this (plus one liveness round trip)
RETRY_BACKOFF_S = 0.25


@dataclass(slots=True)
class ProbeAnswer:
    """What the spec probe (`probe_meta`) got for one turn: enough for a conversation's next turn."""

    ok: bool
    text: str
    turn: int = 1
    conversation_id: str = ""
    replay_pass: int = 1


def retryable(result: StreamResult) -> bool:
    """Server-side or network failures are worth one more try, also when they cut a stream after its 200
    (reset, timeout, broken SSE: a dropped SSH link looks like this); a 4xx says the request is wrong."""
    status = result.http_status
    return not result.ok and (status is None or status < 400 or status == 429 or status >= 500)


async def send(client: ReplayClient, req: ReplayRequest, retries: int, stop: asyncio.Event | None = None,
               server_up: Callable[[], Awaitable[bool]] | None = None) -> StreamResult:
    """Send with bounded retries; the returned result is the last attempt (attempts recorded on it).
    `server_up` is asked before a retry: a dead server gets no more attempts."""
    attempt = 0
    while True:
        attempt += 1
        result = await client.stream(req)
        if result.ok or attempt > retries or not retryable(result) or (stop is not None and stop.is_set()):
            break
        if server_up is not None and not await server_up():
            break
        await asyncio.sleep(RETRY_BACKOFF_S * attempt)
        if stop is not None and stop.is_set():
            break
    result.attempts = attempt
    return result


def to_request(prompt: Prompt, suite: Suite, plan: Plan, extra: dict | None = None, *,
               request_id: str | None = None, temperature: float | None = None) -> ReplayRequest:
    from harness.client.stream import ReplayRequest

    messages = [dict(m) for m in prompt.messages] if prompt.messages else None
    if plan.run.ignore_eos:
        extra = {**(extra or {}), "ignore_eos": True}
    if prompt.response_format:  # structured output, as the suite asks (harness.inputs.expectations)
        extra = {**(extra or {}), "response_format": prompt.response_format}
    return ReplayRequest(
        request_id=request_id or f"{suite.name}/{prompt.id}",
        messages=messages,
        prompt=None if messages else prompt.text,
        max_tokens=int(prompt.max_tokens or plan.run.max_tokens),
        temperature=float(plan.run.temperature if temperature is None else temperature),
        extra_body=dict(extra) if extra else None,
    )


async def replay_phase(client: ReplayClient, plan: Plan, prompts: list[Prompt], suite: Suite,
                       concurrency: int, extra: dict | None, *,
                       watchdog: Callable[[], Awaitable[bool]] | None = None, sizer: Sizer | None = None,
                       order_key: str = "") -> AsyncIterator[tuple[ReplayRequest, Prompt, StreamResult]]:
    """Closed loop: `concurrency` workers pull prompts in order; yields (request, prompt, result) as each
    finishes, one per turn of a multi-turn prompt. Stops early when the watchdog says the server is gone.
    `sizer`: when a pass has been sent in full it may ask for another (harness.bench.sizing): the same prompts
    in an order seeded by `order_key` and the pass, request ids ending in `#p<pass>`."""
    pending: asyncio.Queue[tuple[Prompt, int]] = asyncio.Queue()
    for p in prompts:
        pending.put_nowait((p, 1))
    exhausted = False

    def refill() -> bool:
        """The queue ran dry: one more pass, if the sizer wants one (synchronous: one worker decides)."""
        nonlocal exhausted
        if exhausted or sizer is None or not sizer.another():
            exhausted = True
            return False
        again = list(prompts)
        random.Random(f"{order_key}/p{sizer.passes}").shuffle(again)
        for p in again:
            pending.put_nowait((p, sizer.passes))
        return True

    done: asyncio.Queue[tuple[ReplayRequest, Prompt, StreamResult]] = asyncio.Queue()
    stop = asyncio.Event()
    check: asyncio.Future[bool] | None = None

    async def ask_watchdog() -> bool:
        if watchdog is None:
            return True
        try:
            alive = await watchdog()
        except Exception:  # a dropped link is not a dead server: the target reconnects
            return True
        if not alive:
            stop.set()
        return alive

    async def server_up() -> bool:
        """After a failed request: one liveness check shared by every worker that failed meanwhile, so a
        killed server stops the phase at once instead of failing each queued prompt in turn."""
        nonlocal check
        if check is None or check.done():
            check = asyncio.ensure_future(ask_watchdog())
        return await asyncio.shield(check)

    retries = int(plan.run.retries)

    async def worker() -> None:
        while not stop.is_set():
            try:
                prompt, pass_no = pending.get_nowait()
            except asyncio.QueueEmpty:
                if refill():
                    continue
                return
            suffix = pass_suffix(pass_no)
            first = to_request(prompt, suite, plan, extra, request_id=f"{suite.name}/{prompt.id}{suffix}")
            # one conversation holds its slot for all its turns (live multi-turn: harness.bench.conversation)
            async for req, result in converse(first, prompt, suite,
                                              lambda r: send(client, r, retries, stop, server_up),
                                              stop.is_set, replay_pass=pass_no, suffix=suffix):
                await done.put((req, prompt, result))

    async def guard() -> None:
        while watchdog is not None and not stop.is_set():
            await asyncio.sleep(WATCHDOG_S)
            if not await ask_watchdog():
                return

    if sizer is not None:
        sizer.start()
    # a sized phase may cycle a suite shorter than its concurrency: every slot gets a worker
    width = concurrency if sizer is not None else min(concurrency, len(prompts))
    workers = [asyncio.create_task(worker()) for _ in range(max(1, width))]
    guard_task = asyncio.create_task(guard())
    all_workers = asyncio.gather(*workers)
    try:
        while True:
            getter = asyncio.ensure_future(done.get())
            waits = {getter, all_workers, guard_task} if not guard_task.done() else {getter, all_workers}
            finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if getter in finished:
                yield getter.result()
                continue
            getter.cancel()
            if all_workers in finished or stop.is_set():
                if stop.is_set():
                    # server gone: in-flight requests fail fast on the closed socket; don't wait forever
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(all_workers), timeout=5.0)
                while not done.empty():
                    yield done.get_nowait()
                return
    finally:
        stop.set()
        guard_task.cancel()
        if check is not None:
            check.cancel()
        for w in workers:
            w.cancel()
        await reap(all_workers, guard_task)  # a cancellation of this phase itself goes on up


async def warmup(client: ReplayClient, plan: Plan, variant: Variant | None,
                 timing: dict | None = None) -> int:
    """Warmup requests are excluded from every number. One request alone first, at the variant's own sampler
    (run.temperature, or its sampling arm through the client): the first request down a decode path can
    trigger a one-time compile on a fresh server, timed here as `first_s` (run_phases.one_off). On the H200
    every such stall of a fresh EAGLE-3 server (75-128 s) followed a sampled request, and greedy requests to
    fresh servers decoded at once (docs/real-gpu.md, "The compile, measured once more"), so a greedy run no
    longer sends a sampled request it would then wait two minutes for. Then `warmup_requests` requests, at
    least as many as the plan's highest concurrency and sent that many at a time, so that the batch sizes
    the phases will run have run once: on a fresh EAGLE-3 server on the H200 the first phase at concurrency
    8 after a sequential warmup ran at half the rate that the same server showed moments later."""
    n = int(plan.run.warmup_requests)
    if n <= 0 or not plan.suites:
        return 0
    suite = plan.suites[0]
    prompts = suite.prompts
    width = max(1, max(plan.run.concurrency, default=1))
    reqs = [to_request(prompts[i % len(prompts)], suite, plan, request_id=f"warmup/{i}")
            for i in range(max(n, width))]
    first = await client.stream(to_request(prompts[0], suite, plan, request_id="warmup/first"))
    ok = bool(first.ok)
    sem = asyncio.Semaphore(width)
    times: list[float] = []

    async def one(req: ReplayRequest) -> bool:
        async with sem:
            got = await client.stream(req)
            times.append(got.t_end - got.t_send)
            return bool(got.ok)

    done = ok + sum(await asyncio.gather(*(one(r) for r in reqs)))
    if timing is not None:  # a one-off compile (run_phases.one_off)
        timing["first_s"] = first.t_end - first.t_send
        timing["rest_s"] = sorted(times)[len(times) // 2] if times else None
    return done


async def probe_meta(client: ReplayClient, plan: Plan, prompts: list[Prompt], suite: Suite, concurrency: int,
                     run_dir: Path, variant: str, phase: str,
                     normalise_spec: Callable[[dict[str, Any] | None, int | None], dict[str, Any]]) -> int:
    """Per-request spec stats on servers that only offer them non-streaming (SGLang 0.5.13-0.5.18):
    replay the phase's prompts once more with return_meta_info, outside every timed number. Under greedy
    decoding the outputs, and so the acceptance, are the same as in the timed pass; a conversation's later
    turns follow the probe's own answers (harness.bench.conversation), which greedy makes the timed pass's."""
    sem = asyncio.Semaphore(max(1, concurrency))
    out = CsvAppender(run_dir / "spec_probe.csv", PROBE_COLUMNS)
    written = 0

    async def send(req: ReplayRequest) -> ProbeAnswer:
        nonlocal written
        async with sem:
            got = await client.complete_meta_text(req)
        if got:
            text, meta = got
            vals = normalise_spec(meta, meta.get("completion_tokens"))
            out.append({"variant": variant, "phase": phase, "request_id": req.request_id,
                        "completion_tokens": meta.get("completion_tokens"), **vals})
            written += 1
        return ProbeAnswer(ok=bool(got), text=got[0] if got else "")  # no answer: no later turns

    async def one(prompt: Prompt) -> None:
        async for _ in converse(to_request(prompt, suite, plan), prompt, suite, send):
            pass

    try:
        await asyncio.gather(*(one(p) for p in prompts))
    finally:
        out.close()
    return written
