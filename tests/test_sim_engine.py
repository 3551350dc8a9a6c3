"""The scheduler's batching, acceptance and log-window accounting (run with time scale 0: no waiting), and
its clock (at time scale 1 on a virtual clock: tests/virtual_clock.py)."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from harness.sim.sglang import model
from harness.sim.sglang.engine import Engine, EngineConfig, Req
from harness.sim.sglang.logs import SimLog
from harness.sim.sglang.model import SpecShape

DECODE_RE = re.compile(
    r"Decode batch, #running-req: (?P<run>\d+), #token: \d+, token usage: \d+\.\d\d, "
    r"(?:accept len: (?P<len>\d+\.\d\d), accept rate: (?P<rate>\d+\.\d\d), )?"
    r"cuda graph: (?P<graph>True|False), gen throughput \(token/s\): \d+\.\d\d, #queue-req: (?P<queue>\d+)$"
)
PREFILL_RE = re.compile(
    r"Prefill batch, #new-seq: (?P<seq>\d+), #new-token: (?P<new>\d+), #cached-token: "
    r"(?P<cached>\d+), .* #running-req: (?P<run>\d+), #queue-req: (?P<queue>\d+), "
)


def make(spec: SpecShape | None = None, profile=(0.8, 0.6, 0.4), **kw) -> tuple[Engine, io.StringIO]:
    err = io.StringIO()
    cfg = EngineConfig(
        max_running=kw.pop("max_running", 8),
        max_total_tokens=100_000,
        context_len=8192,
        chunked_prefill_size=8192,
        decode_log_interval=kw.pop("interval", 1),
        graph_backend="full",
        graph_max_bs=kw.pop("graph_max_bs", 256),
        vocab_size=32000,
        eos_token_id=2,
        seed=7,
        time_scale=kw.pop("time_scale", 0.0),
        spec=spec,
        per_position=tuple(profile),
        **kw,
    )
    return Engine(cfg, SimLog(err=err, out=io.StringIO())), err


async def run_all(engine: Engine, reqs: list[Req]) -> None:
    task = asyncio.create_task(engine.run())
    for r in reqs:
        engine.submit(r)
    try:
        for r in reqs:
            while not r.finished:
                await r.event.wait()
                r.event.clear()
    finally:
        task.cancel()


def lines(err: io.StringIO, regex: re.Pattern) -> list[re.Match]:
    return [m for line in err.getvalue().splitlines() if (m := regex.search(line))]


def req(n: int, prompt: list[int] | None = None, **kw) -> Req:
    return Req(
        rid=f"r{n}",
        prompt_ids=prompt or [1, 10 + n, 20 + n, 30],
        max_new_tokens=kw.pop("max_new", 40),
        ignore_eos=True,
        **kw,
    )


async def test_each_window_line_is_consistent_with_its_step():
    shape = SpecShape(3, 1, 4)
    engine, err = make(shape, interval=1)
    r = req(0, max_new=60)
    await run_all(engine, [r])
    decode = lines(err, DECODE_RE)
    assert len(decode) == r.verify_ct
    lengths = [float(m["len"]) for m in decode]
    # batch 1, one step per window: accept len = k + 1, rate = k / (num_draft_tokens - 1)
    for m, length in zip(decode, lengths, strict=True):
        assert float(m["rate"]) == pytest.approx(round((length - 1) / 3, 2))
    assert sum(lengths) == pytest.approx(r.verify_ct + r.correct_drafts)
    assert len(r.output_ids) == 60 and sum(r.histogram) == r.verify_ct


class LoopWork:
    """A metrics sink whose decode-step hook spends the loop's time, as the scheduler's own work per step
    (and the event loop's) does on a real machine: `per_step` seconds after every step, plus `stall` once
    after step `stall_at` (the process not scheduled for a while). Runs on tests/virtual_clock.py's loop."""

    def __init__(self, per_step: float = 0.0, stall_at: int = 0, stall: float = 0.0):
        self.per_step, self.stall_at, self.stall, self.steps = per_step, stall_at, stall, 0

    def on_decode_iter(self, engine: Engine, tokens: int, graph: bool) -> None:
        self.steps += 1
        spent = self.per_step + (self.stall if self.steps == self.stall_at else 0.0)
        asyncio.get_running_loop().advance(spent)  # type: ignore[attr-defined]

    def on_prefill_tick(self, *args) -> None: ...
    def on_decode_tick(self, *args) -> None: ...
    def on_output(self, *args) -> None: ...
    def on_request_done(self, *args) -> None: ...


GEN_RE = re.compile(r"Decode batch, #running-req: 1, .*gen throughput \(token/s\): (?P<gen>\d+\.\d\d),")


def window_step_ms(work: LoopWork, steps: int = 40, interval: int = 4) -> list[float]:
    """Step ms of each Decode window but the first (which holds the prefill) of one baseline request of
    `steps` decode steps at time scale 1, the loop doing `work`."""
    from tests.virtual_clock import run_on_virtual_clock

    async def go() -> str:
        engine, err = make(interval=interval, time_scale=1.0)
        engine.metrics = work
        await run_all(engine, [req(0, max_new=1 + steps)])
        return err.getvalue()

    gens = [float(m["gen"]) for m in GEN_RE.finditer(run_on_virtual_clock(go()))]
    assert len(gens) == steps // interval
    return [1000.0 / g if g else 0.0 for g in gens[1:]]  # 0: a window of no time (gen throughput 0.00)


def test_the_scheduler_keeps_the_models_clock_despite_its_own_work():
    """A step that starts late (the loop's own work, a timer that fires late) sleeps that much less, so the
    windows' step times are the model's, not the model's plus the loop's; a loop further behind than
    CATCH_UP_S starts from now: the time is lost once, and no burst of short steps follows."""
    step_ms = model.decode_step_seconds(1, True) * 1000.0  # 11.1 ms
    assert window_step_ms(LoopWork()) == pytest.approx([step_ms] * 9, rel=1e-3)
    # work of 60 % of every step: hidden in the step's sleep
    assert window_step_ms(LoopWork(per_step=0.6 * step_ms / 1000)) == pytest.approx([step_ms] * 9, rel=1e-3)
    # a stall within CATCH_UP_S (10 ms, in the 3rd window) is caught up inside its window
    caught = window_step_ms(LoopWork(stall_at=10, stall=0.010))
    assert caught == pytest.approx([step_ms] * 9, rel=1e-3)
    # a stall past it (100 ms) is lost: its window is 100 ms longer, every other one keeps the model's pace
    lost = window_step_ms(LoopWork(stall_at=10, stall=0.100))
    assert lost[1] * 4 == pytest.approx(step_ms * 4 + 100.0, rel=1e-3)
    assert lost[:1] + lost[2:] == pytest.approx([step_ms] * 8, rel=1e-3)


async def test_windows_are_batch_weighted_and_totals_only_advance_on_ticks():
    engine, err = make(SpecShape(3, 1, 4), profile=(1.0, 1.0, 1.0), interval=5)
    reqs = [req(i, max_new=1 + 4 * 10) for i in range(2)]  # prefill token + 10 steps of 4 tokens
    await run_all(engine, reqs)
    decode = lines(err, DECODE_RE)
    assert [(m["run"], m["len"], m["rate"]) for m in decode] == [("2", "4.00", "1.00")] * 2
    assert engine.avg_spec_accept_length == 4.0
    assert engine.flush_cache() and engine.avg_spec_accept_length is None and engine.forward_ct_decode == 0


async def test_partial_window_is_not_in_the_cumulative_average():
    engine, err = make(SpecShape(3, 1, 4), profile=(1.0, 1.0, 1.0), interval=40)
    await run_all(engine, [req(0, max_new=41)])  # 10 verify steps < 40: no line, no average yet
    assert lines(err, DECODE_RE) == [] and engine.avg_spec_accept_length is None


async def test_wrong_flag_accepts_nothing():
    engine, err = make(SpecShape(3, 1, 4), profile=(1.0, 1.0, 1.0), interval=2, wrong_flag=True)
    reqs = [req(i, max_new=30) for i in range(3)]
    await run_all(engine, reqs)
    decode = lines(err, DECODE_RE)
    assert decode and {(m["len"], m["rate"]) for m in decode} == {("1.00", "0.00")}
    assert engine.avg_spec_accept_length == 1.0
    assert all(r.correct_drafts == 0 and r.verify_ct == 29 and r.histogram == [29] for r in reqs)


async def test_greedy_output_is_lossless_across_variants():
    prompts = [[1, 5, 6, 7], [1, 9, 9, 9, 9, 12]]
    base, _ = make(None)
    spec, _ = make(SpecShape(5, 4, 8), profile=(0.9, 0.8, 0.7, 0.6, 0.5))
    a = [Req(rid=f"a{i}", prompt_ids=p, max_new_tokens=50, temperature=0.0) for i, p in enumerate(prompts)]
    b = [Req(rid=f"b{i}", prompt_ids=p, max_new_tokens=50, temperature=0.0) for i, p in enumerate(prompts)]
    await run_all(base, a)
    await run_all(spec, b)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    assert [r.text() for r in a] == [r.text() for r in b]
    assert sum(r.verify_ct for r in b) < sum(len(r.output_ids) for r in b) - 2  # and it did speculate


async def test_admission_cap_queue_and_prefix_cache():
    engine, err = make(None, max_running=2, interval=1)
    shared = [1, 2, 3, 4, 5, 6]
    reqs = [req(i, prompt=shared, max_new=5) for i in range(5)]
    await run_all(engine, reqs)
    prefill = lines(err, PREFILL_RE)
    assert [(m["seq"], m["queue"]) for m in prefill][0] == ("2", "3")
    assert max(int(m["run"]) for m in lines(err, DECODE_RE)) == 2
    assert reqs[0].cached_tokens == 0 and all(r.cached_tokens == len(shared) - 1 for r in reqs[1:])
    assert int(prefill[0]["new"]) == len(shared) + 1 and int(prefill[0]["cached"]) == len(shared) - 1


async def test_batches_beyond_the_captured_size_run_eagerly():
    engine, err = make(None, graph_max_bs=1, interval=1)
    await run_all(engine, [req(0, max_new=4), req(1, max_new=8)])
    graphs = {(m["run"], m["graph"]) for m in lines(err, DECODE_RE)}
    assert ("2", "False") in graphs and ("1", "True") in graphs


async def test_natural_eos_and_abort():
    engine, _ = make(None)
    r = Req(rid="x", prompt_ids=[1, 2, 3], max_new_tokens=5000)
    await run_all(engine, [r])
    assert (
        r.finish == {"type": "stop", "matched": 2}
        and r.output_ids[-1] == 2
        and 160 <= len(r.output_ids) < 1200
    )
    task = asyncio.create_task(engine.run())
    long = engine.submit(Req(rid="y", prompt_ids=[1, 2], max_new_tokens=10_000, ignore_eos=True))
    await long.event.wait()
    assert not engine.flush_cache()  # busy
    engine.abort(long)
    for _ in range(100):
        if engine.idle:
            break
        await asyncio.sleep(0)
    task.cancel()
    assert engine.idle and engine.flush_cache()


async def test_a_request_ending_mid_character_flushes_a_replacement_character():
    """SGLang's detokenizer emits the held-back bytes as U+FFFD when the request finishes."""
    engine, _ = make(None)
    prompt = [1, 2, 3]
    key = model.stable_hash(tuple(prompt))
    cut = next(  # a lone held-back position: the token after it completes the character and holds nothing
        i
        for i in range(1, 1000)
        if model.held_back(key, i) and not (model.held_back(key, i - 1) or model.held_back(key, i + 1))
    )
    ends_held = Req(rid="a", prompt_ids=prompt, max_new_tokens=cut + 1, ignore_eos=True)
    ends_complete = Req(rid="b", prompt_ids=prompt, max_new_tokens=cut + 2, ignore_eos=True)
    await run_all(engine, [ends_held, ends_complete])
    assert ends_held.texts[-1] == "\ufffd" and ends_held.finish == {"type": "length", "length": cut + 1}
    assert ends_complete.texts[-2:] == ["", model.output_token(key, cut + 1, 32000)[1]]
    assert ends_complete.texts[-1].startswith(model.SPLIT_CHAR)
