"""The warmup runs the batch sizes the phases will run, and none of it is measured."""

from __future__ import annotations

import asyncio

from harness.bench.replay import warmup
from harness.client.collect import StreamResult
from harness.inputs.config import Plan
from harness.inputs.suites import Prompt, Suite


class _Client:
    def __init__(self) -> None:
        self.inflight = self.peak = 0
        self.seen: list[tuple[str, float]] = []

    async def stream(self, req):
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        self.seen.append((req.request_id, req.temperature))
        await asyncio.sleep(0)  # let the others start: a real stream yields many times
        await asyncio.sleep(0)
        self.inflight -= 1
        ok = not req.request_id.endswith("/3")
        return StreamResult(ok=ok, error=None if ok else "http 500", http_status=200 if ok else 500,
                            t_send=1.0, t_first=1.1 if ok else None, t_end=1.2, wall_send=1.7e9)


def _plan(concurrency: list[int], warmup_requests: int, temperature: float = 0.0) -> Plan:
    suite = Suite(name="s", prompts=[Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(3)])
    return Plan(name="warm", model={"path": "m"}, variants=[{"name": "baseline"}], suites=[suite],
                run={"concurrency": concurrency, "warmup_requests": warmup_requests, "max_tokens": 8,
                     "temperature": temperature, "seed": 1})


def test_warmup_reaches_the_highest_concurrency():
    client = _Client()
    ok = asyncio.run(warmup(client, _plan([1, 8], 2), None))
    ids = [i for i, _ in client.seen]
    assert ids[0] == "warmup/first" and all(t == 0.0 for _, t in client.seen)  # greedy: nothing sampled
    assert len(ids) == 1 + 8 and all(i.startswith("warmup/") for i in ids)  # max(2, 8) after the first
    assert client.peak == 8  # sent 8 at a time, like the c8 phase
    assert ok == 8  # warmup/3 failed; failures are counted, not raised


def test_warmup_count_and_width_at_concurrency_one():
    client = _Client()
    asyncio.run(warmup(client, _plan([1], 3), None))
    assert len(client.seen) == 1 + 3
    assert client.peak == 1


def test_no_warmup_when_disabled():
    client = _Client()
    assert asyncio.run(warmup(client, _plan([4], 0), None)) == 0
    assert client.seen == []


def test_the_first_request_takes_the_runs_own_sampler():
    # a sampled run pays the sampled path's one-off compile in the warmup, a greedy one never sends a sampled
    # request (on the H200 only sampled requests stalled a fresh EAGLE-3 server)
    for temperature in (0.0, 0.6):
        client = _Client()
        asyncio.run(warmup(client, _plan([2], 1, temperature), None))
        assert client.seen[0] == ("warmup/first", temperature)
        assert {t for _, t in client.seen} == {temperature}
