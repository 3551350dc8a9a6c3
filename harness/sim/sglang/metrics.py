"""Prometheus ``/metrics`` text of SGLang 0.5.15 (served only with --enable-metrics).

Names, HELP strings, label sets and bucket bounds are those of the H200 captures
(tests/fixtures/sglang-0.5.15.post1/metrics-*.txt). As in SGLang, scheduler gauges change only on the
Prefill/Decode log ticks; tokenizer-side counters and histograms change as requests progress.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.sim.sglang.engine import Engine, Req

TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
E2E_BUCKETS = TTFT_BUCKETS + (600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
TOKEN_BUCKETS = (
    100.0,
    300.0,
    500.0,
    700.0,
    1000.0,
    1500.0,
    2000.0,
    3000.0,
    4000.0,
    5000.0,
    6000.0,
    7000.0,
    8000.0,
    9000.0,
    10000.0,
    12500.0,
    15000.0,
    17500.0,
    20000.0,
    22500.0,
    25000.0,
    27500.0,
    30000.0,
    35000.0,
    40000.0,
    60000.0,
    80000.0,
    100000.0,
    200000.0,
    300000.0,
    400000.0,
    600000.0,
    800000.0,
    1e6,
    1.1e6,
)
QUEUE_BUCKETS = (
    0.0,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    200.0,
    300.0,
    400.0,
    500.0,
    600.0,
    700.0,
    800.0,
    900.0,
    1000.0,
    1200.0,
    1400.0,
    1600.0,
    1800.0,
    2000.0,
    2500.0,
    3000.0,
)

HISTOGRAMS = (  # name, help, buckets
    ("time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", E2E_BUCKETS),
    ("prompt_tokens_histogram", "Histogram of prompt token length.", TOKEN_BUCKETS),
    (
        "uncached_prompt_tokens_histogram",
        "Histogram of uncached (compute) prompt token length.",
        TOKEN_BUCKETS,
    ),
    ("generation_tokens_histogram", "Histogram of generation token length.", TOKEN_BUCKETS),
    ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS),
)
GAUGES = (  # scheduler gauges, refreshed on log ticks
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("page_size", "KV cache page size in tokens."),
    ("num_pages", "Number of KV cache pages."),
    ("context_len", "Maximum context length."),
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
    (
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    ("spec_num_steps", "Currently active speculative_num_steps."),
    (
        "spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
)
COUNTERS = (  # tokenizer-side counters
    ("prompt_tokens_total", "Number of prefill tokens processed."),
    ("generation_tokens_total", "Number of generation tokens processed."),
    ("spec_verify_calls_total", "Number of speculative decoding verification calls."),
    ("num_requests_total", "Number of requests processed."),
)


def go_float(v: float) -> str:
    """prometheus_client's floatToGoString."""
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    s = repr(float(v))
    dot = s.find(".")
    if v > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.bounds = buckets
        self.counts = [0.0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1, weight_sum: float | None = None) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.sum += value if weight_sum is None else weight_sum


class Metrics:
    """Holds the sim's metric values and renders them; also the engine's MetricsSink."""

    def __init__(self, model_name: str, *, spec: bool):
        self.tok = {"engine_type": "unified", "model_name": model_name}
        self.sched = dict(self.tok, moe_ep_rank="0", pp_rank="0", tp_rank="0")
        self.spec = spec
        self.hist = {name: Histogram(b) for name, _, b in HISTOGRAMS}
        self.counters: dict[str, float] = defaultdict(float)
        self.cached_device = 0.0
        self.gauges: dict[str, float] = {name: 0.0 for name, _ in GAUGES}
        self.graph_passes: dict[str, float] = defaultdict(float)
        self.realtime: dict[str, float] = defaultdict(float)
        self.http_total: dict[tuple[str, str], float] = defaultdict(float)
        self.http_resp: dict[tuple[str, str, str], float] = defaultdict(float)
        self.http_active: dict[tuple[str, str], float] = defaultdict(float)

    def set_static(self, *, max_total_tokens: int, context_len: int, steps: int, draft_tokens: int) -> None:
        self.gauges.update(
            max_total_num_tokens=max_total_tokens,
            num_pages=max_total_tokens,
            page_size=1,
            context_len=context_len,
            kv_available_tokens=max_total_tokens,
            spec_num_steps=steps,
            spec_num_draft_tokens=draft_tokens,
        )

    # --- HTTP middleware hooks ---------------------------------------------------------------------------
    def http_start(self, path: str, method: str) -> None:
        self.http_total[(path, method)] += 1
        self.http_active[(path, method)] += 1

    def http_end(self, path: str, method: str, status: int) -> None:
        self.http_active[(path, method)] -= 1
        self.http_resp[(path, method, str(status))] += 1

    # --- engine hooks ------------------------------------------------------------------------------------
    def _pool(self, engine: Engine) -> None:
        used = engine.num_used_tokens()
        self.gauges.update(
            num_running_reqs=len(engine.running),
            num_queue_reqs=len(engine.waiting),
            token_usage=round(engine.token_usage(), 2),
            num_used_tokens=used,
            kv_used_tokens=used,
            kv_available_tokens=engine.cfg.max_total_tokens - used,
        )

    def on_prefill_tick(self, engine: Engine, new_tokens: int, cached: int) -> None:
        self._pool(engine)
        total = new_tokens + cached
        self.gauges["cache_hit_rate"] = cached / total if total else 0.0
        self.graph_passes["prefill_none"] += 1
        self.realtime["prefill_compute"] += new_tokens
        self.realtime["prefill_cache"] += cached

    def on_decode_iter(self, engine: Engine, tokens: int, graph: bool) -> None:
        self.graph_passes["decode_cuda_graph" if graph else "decode_none"] += 1
        self.realtime["decode"] += tokens

    def on_decode_tick(self, engine: Engine, accept_len: float, accept_rate: float) -> None:
        self._pool(engine)
        self.gauges.update(
            gen_throughput=engine.last_gen_throughput,
            cache_hit_rate=0.0,
            spec_accept_length=accept_len,
            spec_accept_rate=accept_rate,
            is_cuda_graph=1.0 if engine.last_graph else 0.0,
            decode_sum_seq_lens=engine.num_used_tokens(),
        )

    def on_output(self, req: Req, n_new: int, interval: float | None) -> None:
        if interval is None:
            self.hist["time_to_first_token_seconds"].observe(req.t_first - req.t_received)
            self.hist["queue_time_seconds"].observe(max(0.0, req.t_dispatch - req.t_received))
        elif n_new > 0:
            self.hist["inter_token_latency_seconds"].observe(interval / n_new, n_new, interval)

    def on_request_done(self, req: Req) -> None:
        prompt, gen = len(req.prompt_ids), len(req.output_ids)
        self.counters["prompt_tokens_total"] += prompt
        self.counters["generation_tokens_total"] += gen
        self.counters["num_requests_total"] += 1
        if req.verify_ct:
            self.counters["spec_verify_calls_total"] += req.verify_ct
        self.cached_device += req.cached_tokens
        self.hist["e2e_request_latency_seconds"].observe(time.perf_counter() - req.t_received)
        self.hist["prompt_tokens_histogram"].observe(prompt)
        self.hist["uncached_prompt_tokens_histogram"].observe(prompt - req.cached_tokens)
        self.hist["generation_tokens_histogram"].observe(gen)

    # --- rendering ---------------------------------------------------------------------------------------
    def render(self) -> str:
        out: list[str] = []

        def head(name: str, help_: str, kind: str) -> None:
            out.append(f"# HELP sglang:{name} {help_}")
            out.append(f"# TYPE sglang:{name} {kind}")

        for name, help_, _ in HISTOGRAMS:
            h = self.hist[name]
            if name == "inter_token_latency_seconds" and not any(h.counts):
                continue  # multiprocess prometheus lists a histogram only once it has a sample
            head(name, help_, "histogram")
            out.append(f"sglang:{name}_sum{_labels(self.tok)} {go_float(h.sum)}")
            acc = 0.0
            for bound, c in zip(h.bounds + (math.inf,), h.counts, strict=True):
                acc += c
                out.append(
                    f"sglang:{name}_bucket{_labels(dict(self.tok, le=go_float(bound)))} {go_float(acc)}"
                )
            out.append(f"sglang:{name}_count{_labels(self.tok)} {go_float(acc)}")
        head("http_requests_active", "Number of currently active HTTP requests", "gauge")
        for (path, method), v in self.http_active.items():
            out.append(
                f"sglang:http_requests_active{_labels({'endpoint': path, 'method': method})} {go_float(v)}"
            )
        for name, help_ in GAUGES:
            head(name, help_, "gauge")
            out.append(f"sglang:{name}{_labels(self.sched)} {go_float(float(self.gauges[name]))}")
        head("http_requests_total", "Total number of HTTP requests by endpoint and method", "counter")
        for (path, method), v in self.http_total.items():
            out.append(
                f"sglang:http_requests_total{_labels({'endpoint': path, 'method': method})} {go_float(v)}"
            )
        head("http_responses_total", "Total number of HTTP responses by endpoint and status code", "counter")
        for (path, method, code), v in self.http_resp.items():
            labels = _labels({"endpoint": path, "method": method, "status_code": code})
            out.append(f"sglang:http_responses_total{labels} {go_float(v)}")
        for name, help_ in COUNTERS:
            if name == "spec_verify_calls_total" and not self.spec:
                continue
            head(name, help_, "counter")
            out.append(f"sglang:{name}{_labels(self.tok)} {go_float(self.counters[name])}")
        if self.cached_device:
            head(
                "cached_tokens_total",
                "Number of cached prompt tokens by source (device/host/storage).",
                "counter",
            )
            out.append(
                f"sglang:cached_tokens_total{_labels(dict(self.tok, cache_source='device'))} "
                f"{go_float(self.cached_device)}"
            )
        head(
            "cuda_graph_passes_total", "Total number of forward passes categorized by CUDA graph.", "counter"
        )
        for mode, v in self.graph_passes.items():
            out.append(f"sglang:cuda_graph_passes_total{_labels(dict(self.sched, mode=mode))} {go_float(v)}")
        head(
            "realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). mode: "
            "prefill_compute, prefill_cache, decode.",
            "counter",
        )
        for mode, v in self.realtime.items():
            out.append(f"sglang:realtime_tokens_total{_labels(dict(self.sched, mode=mode))} {go_float(v)}")
        return "\n".join(out) + "\n"
