"""The vLLM stand-in's HTTP server and generation loop (one asyncio task per request; the step time of
each step is the SGLang stand-in's model at the current batch size)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from harness.sim.sglang import conditions, numerics
from harness.sim.sglang import model as m
from harness.sim.vllm import args as cli
from harness.sim.vllm import info, logs, refusals
from harness.sim.vllm import logprobs as lp
from harness.sim.vllm import request_metrics as rm

VOCAB = 32000
_HIST = ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
         "vllm:e2e_request_latency_seconds")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@dataclass
class Sim:
    ns: Any
    model_name: str
    k: int = 0  # num_speculative_tokens (0: no speculation)
    profile: list[float] = field(default_factory=list)  # the drafter's per-position acceptance
    # acceptance falls with context and the sampler as on the SGLang stand-in (DRAFTBENCH_SIM_CONTEXT_DECAY)
    decay: conditions.ContextDecay = field(default_factory=conditions.ContextDecay.from_env)
    running: int = 0
    counters: dict[str, int] = field(default_factory=lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0})
    per_pos: list[int] = field(default_factory=list)
    hist: dict[str, list[float]] = field(default_factory=lambda: {h: [0.0, 0.0] for h in _HIST})
    window: dict[str, Any] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    aux_layers: list[int] = field(default_factory=list)
    # near-ties, broken verify
    numerics: numerics.Numerics = field(default_factory=numerics.Numerics.from_env)
    # DRAFTBENCH_SIM_TIME_SCALE multiplies every modelled duration, as in the SGLang stand-in (tests run fast)
    time_scale: float = field(
        default_factory=lambda: float(os.environ.get("DRAFTBENCH_SIM_TIME_SCALE") or 1.0))

    @classmethod
    def build(cls, ns: Any) -> Sim:
        name = (ns.served_model_name or [ns.model_tag])[0]
        sim = cls(ns, name)
        cfg = ns.speculative_config
        if cfg:
            sim.k = int(cfg.get("num_speculative_tokens") or 1)
            sim.per_pos = [0] * sim.k
            draft = Path(str(cfg.get("model") or ""))
            per_position = list(info.read_json(draft / "acceptance.json").get("per_position") or [])
            archs = " ".join(info.read_json(draft / "config.json").get("architectures") or []).lower()
            if cfg.get("method") == "eagle" and "eagle3" in archs:
                per_position = []  # an EAGLE-3 head served as EAGLE-1: nothing it drafts is accepted
            sim.aux_layers, from_config = info.aux_layers(ns, draft)
            trained = info.trained_layers(draft)
            if cfg.get("method") == "eagle3" and trained is not None and trained != sim.aux_layers:
                per_position = [0.036, 0.1, 0.1]  # fed other layers than it was trained on (vllm#50170)
            sim.profile = per_position
        sim.reset_window()
        return sim

    def reset_window(self) -> None:
        self.window = {"t0": time.monotonic(), "gen": 0, "prompt": 0, "drafts": 0, "draft_tokens": 0,
                       "accepted": 0, "per_pos": [0] * self.k}

    def step_seconds(self) -> float:
        graph = not self.ns.enforce_eager
        if not self.k:
            return m.decode_step_seconds(max(1, self.running), graph) * self.time_scale
        return m.verify_step_seconds(max(1, self.running), m.SpecShape(self.k, 1, self.k + 1),
                                     graph) * self.time_scale

    def observe_step(self, accepted: int) -> None:
        for bag in (self.counters, self.window):
            bag["drafts"] += 1
            bag["draft_tokens"] += self.k
            bag["accepted"] += accepted
        for i in range(accepted):
            self.per_pos[i] += 1
            self.window["per_pos"][i] += 1


async def _generate(sim: Sim, prompt_ids: list[int], max_tokens: int, toks: lp.Tokens, start: int = 0,
                    sampler: tuple[float, float] = (0.0, 1.0)):
    """Yields (token texts of one step, finish reason or None, request spec stats); `start`: the answer's
    position of the first token (a continue_final_message continuation); `sampler`: (temperature, top_p)."""
    t_arrive = time.monotonic()
    sim.running += 1
    stats = rm.new_stats(sim.k)
    key = toks.key
    try:
        await asyncio.sleep(m.prefill_seconds(len(prompt_ids), 1) * sim.time_scale)
        sim.window["prompt"] += len(prompt_ids)
        ttft = time.monotonic() - t_arrive
        sim.hist[_HIST[0]][0] += ttft
        sim.hist[_HIST[0]][1] += 1
        sim.hist[_HIST[1]][1] += 1  # no queue in the stand-in: zero-length queue times
        natural = max(1, m.natural_length(key) - start)
        limit = min(max_tokens, natural)
        n = 1
        yield [toks.next(start, ("prefill", 1))], ("length" if limit == 1 else None), stats
        while n < limit:
            await asyncio.sleep(sim.step_seconds())
            commit, wrong_at = 1, None
            if sim.k:
                profile = conditions.step_profile(sim.profile, 1, *sampler, len(prompt_ids) + n, sim.decay)
                acc = m.sample_accepted(sim.rng, profile, sim.k)
                wrong_at = numerics.broken_draft(sim.numerics, 0, key, stats["steps"], acc)
                sim.observe_step(acc)
                stats["steps"] += 1
                stats["accepted"] += acc
                stats["hist"][acc] += 1
                stats["per_step"].append(acc)
                commit = acc + 1
            commit = min(commit, limit - n)
            shape = ("vllm", sim.running, sim.k + 1)
            texts = [toks.next(start + n + i, shape, i == wrong_at) for i in range(commit)]
            n += commit
            sim.window["gen"] += commit
            yield texts, ("stop" if n >= natural else "length" if n >= limit else None), stats
    finally:
        sim.running -= 1
        e2e = time.monotonic() - t_arrive
        sim.hist[_HIST[2]][0] += e2e
        sim.hist[_HIST[2]][1] += 1


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _complete(request: web.Request, chat: bool) -> web.StreamResponse:
    sim: Sim = request.app[SIM]
    try:
        body = await request.json()
    except ValueError:
        return refusals.invalid_json()
    refused = refusals.stream_options_without_stream(body)
    if refused is not None:
        return refused
    start, path = 0, 0
    messages = body.get("messages") or []
    if chat and body.get("continue_final_message") and messages \
            and (messages[-1] or {}).get("role") == "assistant":
        key_ids = m.chat_prompt_ids(messages[:-1], VOCAB)  # the answer goes on after the final message
        prefix = str(messages[-1].get("content") or "")
        prompt_ids = key_ids + m.tokenize(prefix, VOCAB)
        key = m.stable_hash(tuple(key_ids))
        start, path = numerics.resume(sim.numerics, key, prefix, VOCAB) or (0, 0)
        key = key if start else m.stable_hash(tuple(prompt_ids))
    elif chat:
        prompt_ids = m.chat_prompt_ids(messages, VOCAB)
        key = m.stable_hash(tuple(prompt_ids))
    else:
        prompt_ids = [1] + m.tokenize(str(body.get("prompt") or ""), VOCAB)
        key = m.stable_hash(tuple(prompt_ids))
    top = lp.request_top(body, chat)
    toks = lp.Tokens(key, sim.numerics, VOCAB, top, path)
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    temperature = body.get("temperature")  # vLLM's default: 1.0
    sampler = (1.0 if temperature is None else float(temperature), conditions.top_p_of(body.get("top_p")))
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    obj = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": rid, "object": obj, "created": created, "model": sim.model_name}
    texts_all: list[str] = []
    finish, stats = None, None
    if not body.get("stream"):
        # (the loop's last values are used after it)
        async for texts, finish, stats in _generate(sim, prompt_ids, max_tokens, toks, start, sampler):  # noqa: B007
            texts_all += texts
        out = _final(sim, base, chat, "".join(texts_all), finish, len(prompt_ids), len(texts_all), stats)
        if top is not None:
            out["choices"][0]["logprobs"] = lp.chat(toks.entries, top) if chat \
                else lp.completion(toks.entries, top)
        return web.json_response(out)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    if chat:
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                    "logprobs": None, "finish_reason": None}]}))
    n = 0
    async for texts, finish, stats in _generate(sim, prompt_ids, max_tokens, toks, start, sampler):  # noqa: B007
        n += len(texts)
        text = "".join(texts)
        choice = ({"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish} if chat
                  else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                        "stop_reason": None})
        chunk: dict[str, Any] = {**base, "choices": [choice]}
        if (body.get("stream_options") or {}).get("continuous_usage_stats"):  # vLLM: cumulative, every chunk
            chunk["usage"] = {"prompt_tokens": len(prompt_ids), "total_tokens": len(prompt_ids) + n,
                              "completion_tokens": n}
        await resp.write(_sse(chunk))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": len(prompt_ids), "total_tokens": len(prompt_ids) + n,
                 "completion_tokens": n}
        # the final chunk (no choices) is written without None fields: usage, fingerprint, metrics
        final: dict[str, Any] = {**base, "choices": [], "usage": usage,
                                 "system_fingerprint": rm.fingerprint(sim.ns)}
        spec = rm.spec_block(sim.k, sim.ns.per_request_spec_decode_metrics, stats or rm.new_stats(sim.k))
        if spec is not None:
            final["metrics"] = {"speculative_decoding": spec}
        await resp.write(_sse(final))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _final(sim: Sim, base: dict, chat: bool, text: str, finish: str | None, prompt: int, n: int,
           stats: dict | None) -> dict[str, Any]:
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish} if chat
              else {"index": 0, "text": text, "finish_reason": finish})
    out = {**base, "object": "chat.completion" if chat else "text_completion", "choices": [choice],
           "usage": {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n},
           "system_fingerprint": rm.fingerprint(sim.ns)}
    spec = rm.spec_block(sim.k, sim.ns.per_request_spec_decode_metrics, stats) if stats else None
    if spec is not None:
        out["metrics"] = {"speculative_decoding": spec}
    return out


SIM = web.AppKey("sim", Sim)


def metrics_text(sim: Sim) -> str:
    labels = f'engine="0",model_name="{sim.model_name}"'
    lines = []
    for name, (s, n) in sim.hist.items():
        lines += [f"# HELP {name} Histogram of {name[5:]}.", f"# TYPE {name} histogram",
                  f'{name}_bucket{{{labels},le="+Inf"}} {n}', f"{name}_count{{{labels}}} {n}",
                  f"{name}_sum{{{labels}}} {s}"]
    if sim.k:
        for key, name in (("drafts", "num_drafts"), ("draft_tokens", "num_draft_tokens"),
                          ("accepted", "num_accepted_tokens")):
            full = f"vllm:spec_decode_{name}"
            lines += [f"# HELP {full}_total Number of {name[4:]}.", f"# TYPE {full}_total counter",
                      f"{full}_total{{{labels}}} {float(sim.counters[key])}"]
        full = "vllm:spec_decode_num_accepted_tokens_per_pos"
        lines += [f"# HELP {full}_total Accepted tokens per draft position.", f"# TYPE {full}_total counter"]
        lines += [f'{full}_total{{{labels},position="{i}"}} {float(v)}' for i, v in enumerate(sim.per_pos)]
    return "\n".join(lines) + "\n"


async def _log_loop(sim: Sim, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        w = sim.window
        elapsed = max(1e-6, time.monotonic() - w["t0"])
        if w["gen"] or w["prompt"] or sim.running:
            say(logs.engine_stats(w["prompt"] / elapsed, w["gen"] / elapsed, sim.running, 0, 0.0))
            if sim.k and w["drafts"]:
                say(logs.spec_decoding(w["drafts"], w["draft_tokens"], w["accepted"], w["per_pos"], elapsed))
        sim.reset_window()


def build_app(sim: Sim) -> web.Application:
    dev = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"

    @web.middleware
    async def access_log(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            resp = exc
        if not sim.ns.disable_uvicorn_access_log:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            say(logs.access(f"{peer[0]}:{peer[1]}" if peer else "-", request.method, request.path_qs,
                            resp.status))
        if isinstance(resp, web.HTTPException):
            raise resp
        return resp

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": sim.model_name, "object": "model",
                                                              "created": int(time.time()), "owned_by": "vllm",
                                                              "root": sim.ns.model_tag, "parent": None}]})

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": cli.emulated_version()})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=metrics_text(sim), content_type="text/plain")

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response(info.server_info(sim.ns))

    async def reset_prefix_cache(_: web.Request) -> web.Response:
        say(logs.prefix(where="api_router.py:32") + "Resetting prefix cache...")
        return web.json_response({"success": sim.running == 0})

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _complete(request, True)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await _complete(request, False)

    # As vLLM: `--api-key` wins over VLLM_API_KEY; every /v1 route wants `Authorization: Bearer KEY`.
    token = sim.ns.api_key or os.environ.get("VLLM_API_KEY") or None

    @web.middleware
    async def authentication(request: web.Request, handler: Any) -> web.StreamResponse:
        if token and request.method != "OPTIONS" and request.path.startswith("/v1") \
                and request.headers.get("Authorization") != f"Bearer {token}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    app = web.Application(middlewares=[access_log, authentication])
    app[SIM] = sim
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    if dev:
        app.router.add_get("/server_info", server_info)
        app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    return app


async def _serve(sim: Sim) -> None:
    host = sim.ns.host or "0.0.0.0"
    say(logs.prefix(where="utils.py:299") + f"vLLM API server version {cli.emulated_version()}")
    say(logs.prefix(where="utils.py:233") + f"non-default args: {{'model_tag': '{sim.ns.model_tag}'}}")
    if sim.ns.speculative_config:
        cfg = sim.ns.speculative_config
        say(logs.prefix(where="eagle3_utils.py:41") + "Loading drafter model...")
        if cfg.get("method") == "eagle3":
            layers, from_config = info.aux_layers(sim.ns, Path(str(cfg.get("model") or "")))
            say(logs.prefix(where="eagle3_utils.py:30") + "Using Eagle3 auxiliary layers from "
                f"{'config' if from_config else 'model'}: {tuple(layers)}")
    await asyncio.sleep(float(os.environ.get("DRAFTBENCH_SIM_STARTUP_S", "0.5")))
    runner = web.AppRunner(build_app(sim), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, sim.ns.port).start()
    say(logs.prefix(where="api_server.py:2016") + f"Starting vLLM server on http://{host}:{sim.ns.port}")
    say(logs.uvicorn(f"Started server process [{os.getpid()}]"))
    say(logs.uvicorn("Waiting for application startup."))
    say(logs.uvicorn("Application startup complete."))
    interval = float(os.environ.get("DRAFTBENCH_SIM_VLLM_LOG_INTERVAL_S", "2.0"))
    if not sim.ns.disable_log_stats:
        asyncio.get_running_loop().create_task(_log_loop(sim, interval))
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    ns = cli.parse(list(sys.argv[1:] if argv is None else argv))
    if ns.per_request_spec_decode_metrics != "none" and ns.speculative_config is None:
        # config/vllm.py (0.29.0-0.34.0) refuses at startup, before the server listens
        sys.stderr.write("ValueError: --per-request-spec-decode-metrics requires speculative decoding to be "
                         "enabled (via --speculative-config).\n")
        return 1
    try:
        asyncio.run(_serve(Sim.build(ns)))
    except KeyboardInterrupt:
        return 0
    return 0
