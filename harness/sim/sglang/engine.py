"""The stand-in's scheduler: continuous batching in real (scaled) time, with SGLang's log-window accounting.

One asyncio task plays SGLang's scheduler loop. Waiting requests are admitted up to ``max_running``
(prefill batches are capped by ``chunked_prefill_size`` new tokens); every other iteration is one decode
step over the whole running batch. For a speculative server each decode step is a verify step: each
request commits its accepted drafts plus the bonus token and gets ONE output event for the step.
Counters follow ``metrics_reporter.py`` of 0.5.15: per-iteration, batch-size weighted, reset at every
``--decode-log-interval``-th decode iteration when the Decode line is printed; cumulative spec totals
advance only at those ticks (what ``avg_spec_accept_length`` reports) and are reset by ``flush_cache``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from harness.sim.sglang import conditions, logs, model, numerics, tokens
from harness.sim.sglang import forced as forced_mod
from harness.sim.sglang.prefix_cache import PrefixCache
from harness.sim.sglang.request import Req  # noqa: F401  (the request type: imported from here too)

CATCH_UP_S = 0.02  # how far behind the model's clock the loop may run and still catch up


@dataclass
class EngineConfig:
    max_running: int
    max_total_tokens: int
    context_len: int
    chunked_prefill_size: int
    decode_log_interval: int
    graph_backend: str  # decode phase: "full" or "disabled"
    graph_max_bs: int
    vocab_size: int
    eos_token_id: int
    seed: int
    time_scale: float = 1.0
    spec: model.SpecShape | None = None
    per_position: tuple[float, ...] = ()
    by_content: tuple[tuple[tuple[str, ...], tuple[float, ...]], ...] = ()  # startup.Draft.by_content
    wrong_flag: bool = False  # EAGLE on an EAGLE-3 checkpoint: drafts are never accepted
    stream_interval: int = 1
    forced: forced_mod.Forced | None = None  # SGLANG_SIMULATE_ACC_LEN (harness.sim.sglang.forced)
    # --enable-mfu-metrics: (FLOPs per token, weight bytes, KV bytes per token) for the "est." suffixes
    mfu: tuple[float, float, float] | None = None
    costs: model.StepCosts = model.DEFAULT_COSTS
    noise: model.StepNoise = field(default_factory=model.StepNoise)  # off unless DRAFTBENCH_SIM_STEP_NOISE
    # acceptance falls with context past a knee (harness.sim.sglang.conditions; DRAFTBENCH_SIM_CONTEXT_DECAY)
    context_decay: conditions.ContextDecay = field(default_factory=conditions.ContextDecay.from_env)
    # near-ties that flip with the batch shape, a broken verify path (harness.sim.sglang.numerics)
    numerics: numerics.Numerics = field(default_factory=numerics.Numerics.from_env)


class MetricsSink(Protocol):
    def on_prefill_tick(self, engine: Engine, new_tokens: int, cached: int) -> None: ...
    def on_decode_iter(self, engine: Engine, tokens: int, graph: bool) -> None: ...
    def on_decode_tick(self, engine: Engine, accept_len: float, accept_rate: float) -> None: ...
    def on_output(self, req: Req, n_new: int, interval: float | None) -> None: ...
    def on_request_done(self, req: Req) -> None: ...


class Engine:
    def __init__(self, cfg: EngineConfig, log: logs.SimLog, metrics: MetricsSink | None = None):
        self.cfg = cfg
        self.log = log
        self.metrics = metrics
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.cache = PrefixCache()
        self._wake = asyncio.Event()
        self._counter = itertools.count()
        # metrics_reporter state
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.spec_num_accept_tokens = 0
        self.spec_num_forward_ct = 0
        self.spec_total_accept_tokens = 0
        self.spec_total_forward_ct = 0
        self.last_gen_throughput = 0.0
        self.last_decode_tic = time.perf_counter()
        self.last_prefill_tic = time.perf_counter()
        self.last_graph = False
        self.last_output_time = (
            0.0  # wall time of the latest output of any request (the health probe's signal)
        )
        self._mfu = [0.0, 0.0, 0.0]  # FLOPs, bytes read, bytes written since the last Decode line
        self._clock = 0.0
        self._seen: dict[int, int] = {}  # submissions per prompt key
        self._forced_rng = random.Random(model.stable_hash(cfg.seed, "simulate-acc-len"))

    # --- requests ---------------------------------------------------------------------------------------
    def submit(self, req: Req) -> Req:
        next(self._counter)
        req.prompt_key = model.stable_hash(tuple(req.key_ids or req.prompt_ids))
        # seeded by the prompt and how often it was seen, not by arrival order: health probes and timing must
        # not change which drafts a replayed request accepts (two runs of one plan agree, as under greedy)
        seen = self._seen.get(req.prompt_key, 0)
        self._seen[req.prompt_key] = seen + 1
        req.rng = random.Random(model.stable_hash(self.cfg.seed, req.prompt_key, seen))
        if req.temperature > 0:
            req.sample_key = req.rng.getrandbits(32)
        self.waiting.append(req)
        self._wake.set()
        return req

    def abort(self, req: Req) -> None:
        req.aborted = True
        self._wake.set()

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def num_used_tokens(self) -> int:
        return sum(len(r.prompt_ids) + len(r.output_ids) for r in self.running)

    def token_usage(self) -> float:
        return self.num_used_tokens() / self.cfg.max_total_tokens

    def flush_cache(self) -> bool:
        if not self.idle:
            return False
        self.cache.reset()
        self.forward_ct_decode = self.num_generated_tokens = 0
        self.spec_num_accept_tokens = self.spec_num_forward_ct = 0
        self.spec_total_accept_tokens = self.spec_total_forward_ct = 0
        return True

    @property
    def avg_spec_accept_length(self) -> float | None:
        if self.cfg.spec is None or self.spec_total_forward_ct == 0:
            return None
        return self.spec_total_accept_tokens / self.spec_total_forward_ct

    # --- loop -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            self._drop_aborted()
            if self.idle:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._admit()
            if batch:
                await self._prefill(batch)
            elif self.running:
                await self._decode_step()

    async def _sleep(self, seconds: float) -> None:
        """Sleep so step boundaries follow the model's clock despite processing overhead: a step that starts
        late (the loop's own work, a timer that fires late) sleeps that much less, so a batch's steps average
        the model's time; a loop further behind than CATCH_UP_S (it cannot keep up, or it was idle) starts
        from now: no burst of steps to catch up."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        start = self._clock if now - CATCH_UP_S <= self._clock else now
        self._clock = start + seconds * self.cfg.time_scale * self.cfg.noise()
        await asyncio.sleep(max(0.0, self._clock - now))

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.aborted)
        if any(r.aborted for r in self.running):
            self.running = [r for r in self.running if not r.aborted]

    def _admit(self) -> list[Req]:
        batch: list[Req] = []
        budget = self.cfg.chunked_prefill_size
        while self.waiting and len(self.running) + len(batch) < self.cfg.max_running:
            new = len(self.waiting[0].prompt_ids)
            if batch and new > budget:
                break
            batch.append(self.waiting.popleft())
            budget -= new
        return batch

    async def _prefill(self, batch: list[Req]) -> None:
        now = time.perf_counter()
        cached = [self.cache.match_and_insert(r.prompt_ids) for r in batch]
        new_tokens = sum(len(r.prompt_ids) for r in batch) - sum(cached)
        running_before = len(self.running)
        for r, c in zip(batch, cached, strict=True):
            r.cached_tokens, r.t_dispatch = c, now
        self.running.extend(batch)
        gap = now - self.last_prefill_tic
        self.last_prefill_tic = now
        line = logs.prefill_line(
            new_seq=len(batch),
            new_token=new_tokens,
            cached_token=sum(cached),
            usage=self.token_usage(),
            running=running_before,
            queue=len(self.waiting),
            pending_token=0,
            graph=False,
            input_throughput=new_tokens / gap if gap > 0 else 0.0,
        )
        if self.cfg.mfu and gap > 0:
            line += f", est. prefill TFLOPS/s (per GPU): {self.cfg.mfu[0] * new_tokens / gap / 1e12:.2f}"
        self.log.info(line, scheduler=True)
        if self.metrics:
            self.metrics.on_prefill_tick(self, new_tokens, sum(cached))
        # A prompt longer than the chunk size is prefilled in several passes.
        for _ in range(max(1, -(-new_tokens // self.cfg.chunked_prefill_size))):
            await self._sleep(
                model.prefill_seconds(
                    min(new_tokens, self.cfg.chunked_prefill_size), len(batch), self.cfg.costs
                )
            )
        t = time.perf_counter()
        for r in batch:
            if not r.aborted:
                r.t_first = t
                self._commit(r, 1, shape=("prefill", len(batch)))
        self._retire()

    def _commit(self, r: Req, n: int, fixed_token: bool = False, shape: tuple = ("decode", 1, 1),
                wrong_at: int | None = None) -> None:
        """Append up to ``n`` output tokens, stopping at max_new_tokens or the simulated EOS. `fixed_token`:
        forced acceptance without real draft tokens, every token is id 100 (never EOS). `shape`: the forward
        pass's, which settles near-ties; `wrong_at`: the draft the broken verify path gets wrong."""
        eos_at = None if r.ignore_eos or fixed_token else tokens.eos_index(r) + 1
        before = len(r.output_ids)
        for j in range(n):
            i = r.start_index + len(r.output_ids)
            if eos_at is not None and i + 1 >= eos_at:
                r.output_ids.append(self.cfg.eos_token_id)
                r.texts.append("\ufffd" if tokens.held_back(r, i - 1) else "")
                tokens.commit_eos(r, self.cfg.eos_token_id)
                r.finish = {"type": "stop", "matched": self.cfg.eos_token_id}
                break
            if fixed_token:
                tid, text = forced_mod.FIXED_TOKEN_ID, forced_mod.FIXED_TOKEN_TEXT
            else:
                tid, text = tokens.commit(self.cfg.numerics, self.cfg.vocab_size, r, i, shape, j == wrong_at)
            r.output_ids.append(tid)
            r.texts.append(text)
            if len(r.output_ids) >= r.max_new_tokens:
                r.finish = {"type": "length", "length": r.max_new_tokens}
                if tokens.held_back(r, i):  # the detokenizer flushes partial bytes
                    r.texts[-1] += "\ufffd"
                break
        now = time.perf_counter()
        if self.metrics and r.log_metrics:
            self.metrics.on_output(r, len(r.output_ids) - before, now - r.t_last if before else None)
        r.t_last = now
        self.last_output_time = time.time()
        if r.finish is not None:
            r.t_finished = now
        si = self.cfg.stream_interval  # output_streamer.accept: every token, or when len % interval == 1
        if r.finish is not None or si <= 1 or len(r.output_ids) % si == 1:
            r.event.set()

    def _retire(self) -> None:
        done = [r for r in self.running if r.finished]
        if done:
            self.running = [r for r in self.running if not r.finished]
            for r in done:
                if self.metrics and r.log_metrics:
                    self.metrics.on_request_done(r)

    async def _decode_step(self) -> None:
        cfg = self.cfg
        batch = self.running
        bs = len(batch)
        graph = model.graph_used(bs, cfg.graph_backend, cfg.graph_max_bs)
        if cfg.spec is None:
            await self._sleep(model.decode_step_seconds(bs, graph, cfg.costs))
        else:
            await self._sleep(model.verify_step_seconds(bs, cfg.spec, graph, cfg.costs))
        self.last_graph = graph
        shape = ("decode", bs, 1) if cfg.spec is None else ("verify", bs, cfg.spec.num_draft_tokens)
        correct = 0
        forced = cfg.forced.draw(self._forced_rng, cfg.spec.num_steps) - 1 \
            if cfg.forced is not None and cfg.spec is not None else None
        for r in batch:
            if r.aborted or r.finished:
                continue
            if cfg.spec is None:
                self._commit(r, 1, shape=shape)
                continue
            k, wrong_at = 0, None
            if forced is not None:
                k = forced
            elif not cfg.wrong_flag:
                profile = conditions.step_profile(r.per_position or cfg.per_position, cfg.spec.topk,
                                                  r.temperature, r.top_p,
                                                  len(r.prompt_ids) + len(r.output_ids), cfg.context_decay)
                assert r.rng is not None
                k = model.sample_accepted(r.rng, profile, cfg.spec.max_accepted)
                wrong_at = numerics.broken_draft(cfg.numerics, cfg.seed, r.prompt_key, r.verify_ct, k)
            r.verify_ct += 1
            r.correct_drafts += k
            if len(r.histogram) <= k:
                r.histogram.extend([0] * (k + 1 - len(r.histogram)))
            r.histogram[k] += 1
            correct += k
            self._commit(r, k + 1, fixed_token=forced is not None and not cfg.forced.real_draft_tokens,
                         shape=shape, wrong_at=wrong_at)
        self.num_generated_tokens += bs + correct
        if cfg.mfu:
            flops, weights, kv = cfg.mfu
            self._mfu[0] += flops * (bs + correct)
            self._mfu[1] += weights + kv * self.num_used_tokens()
            self._mfu[2] += kv * (bs + correct)
        if cfg.spec is not None:
            self.spec_num_accept_tokens += correct + bs
            self.spec_num_forward_ct += bs
        self.forward_ct_decode = (self.forward_ct_decode + 1) % (1 << 30)
        if self.metrics:
            self.metrics.on_decode_iter(self, bs + correct, graph)
        if self.forward_ct_decode % cfg.decode_log_interval == 0:
            self._report_decode(bs, graph)
        self._retire()

    def _report_decode(self, bs: int, graph: bool) -> None:
        now = time.perf_counter()
        gap = now - self.last_decode_tic
        self.last_decode_tic = now
        self.last_gen_throughput = self.num_generated_tokens / gap if gap > 0 else 0.0
        self.num_generated_tokens = 0
        spec = None
        accept_len = accept_rate = 0.0
        if self.cfg.spec is not None and self.spec_num_forward_ct > 0:
            accept_len = self.spec_num_accept_tokens / self.spec_num_forward_ct
            per_round = (
                self.cfg.spec.num_draft_tokens - 1
                if self.cfg.spec.num_draft_tokens
                else self.cfg.spec.num_steps
            )
            total_drafts = self.spec_num_forward_ct * per_round
            accept_rate = (
                (self.spec_num_accept_tokens - self.spec_num_forward_ct) / total_drafts
                if total_drafts
                else 0.0
            )
            self.spec_total_accept_tokens += self.spec_num_accept_tokens
            self.spec_total_forward_ct += self.spec_num_forward_ct
            self.spec_num_accept_tokens = self.spec_num_forward_ct = 0
            spec = (accept_len, accept_rate)
        line = logs.decode_line(
            running=bs,
            num_used=self.num_used_tokens(),
            usage=self.token_usage(),
            spec=spec,
            graph=graph,
            gen_throughput=self.last_gen_throughput,
            queue=len(self.waiting),
        )
        if self.cfg.mfu and gap > 0:
            flops, read, write = (v / gap for v in self._mfu)
            line += (
                f", est. decode TFLOPS/s (per GPU): {flops / 1e12:.2f}, est. read BW (GB/s per GPU): "
                f"{read / 1e9:.2f}, est. write BW (GB/s per GPU): {write / 1e9:.2f}"
            )
            self._mfu = [0.0, 0.0, 0.0]
        self.log.info(line, scheduler=True)
        if self.metrics:
            self.metrics.on_decode_tick(self, accept_len, accept_rate)
