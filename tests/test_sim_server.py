"""End to end: `python -m harness.sim` as a subprocess on a free port, checked against the real captures."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest

from harness.sim.sglang.fixtures import write_eagle2_drafter, write_eagle3_drafter, write_target_model

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
ENV = {"DRAFTBENCH_SIM_TIME_SCALE": "0.05", "DRAFTBENCH_SIM_STARTUP_S": "0.05"}


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, method: str = "GET", timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def launch(tmp: Path, name: str, *flags: str, wait: bool = True) -> Server:
    port = free_port()
    log = tmp / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.sim",
                "--model-path",
                str(tmp / "target"),
                "--port",
                str(port),
                *flags,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV},
            start_new_session=True,
        )
    server = Server(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 60
    while wait and time.monotonic() < deadline:
        assert proc.poll() is None, server.text()
        try:
            if http(server.url + "/health_generate")[0] == 200:
                return server
        except OSError:
            time.sleep(0.02)  # not listening yet: poll again until the deadline
    if wait:
        raise TimeoutError(f"stand-in not healthy within 60 s:\n{server.text()}")
    return server


def stop(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    return server.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sim")
    write_target_model(
        tmp / "target",
        hidden_size=64,
        num_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=32000,
    )
    write_eagle3_drafter(tmp / "good", target_hidden_size=64, per_position=[0.9, 0.82, 0.78])
    write_eagle2_drafter(tmp / "eagle2", hidden_size=64)
    write_eagle3_drafter(tmp / "same-width", hidden_size=64, per_position=[0.9, 0.9, 0.9])
    return tmp


@pytest.fixture(scope="module")
def spec(models) -> Iterator[Server]:
    server = launch(
        models,
        "eagle3",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(models / "good"),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--enable-metrics",
        "--decode-log-interval",
        "4",
        "--cuda-graph-max-bs-decode",
        "16",
    )
    yield server
    stop(server)


@pytest.fixture(scope="module")
def base(models) -> Iterator[Server]:
    server = launch(models, "baseline", "--api-key", "sekret")
    yield server
    stop(server)


def captured(tag: str) -> list[dict]:
    out = []
    for line in gzip.open(FIX / "sse-eagle3.txt.gz", "rt"):
        t, _, raw = line.rstrip("\n").split("\t", 2)
        if t == tag and raw.startswith("data: {"):
            out.append(json.loads(raw[6:]))
    return out


def http_post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


async def post_raw(url: str, body: dict, headers: dict | None = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.read()


def events(raw: bytes) -> list[bytes]:
    """Split an SSE body; every event must be exactly `data: <payload>` followed by a blank line."""
    assert raw.endswith(b"\n\n")
    parts = raw[:-2].split(b"\n\n")
    assert all(p.startswith(b"data: ") and b"\n" not in p for p in parts)
    assert parts[-1] == b"data: [DONE]"
    payloads = [p[6:] for p in parts[:-1]]
    assert all(orjson.dumps(orjson.loads(p)) == p for p in payloads)  # compact, like the capture
    return payloads


def shape(chunk: dict) -> tuple:
    """Key order of the chunk, its choice, the delta and the usage object."""
    choice = chunk["choices"][0] if chunk["choices"] else {}
    return (tuple(chunk), tuple(choice), tuple(choice.get("delta", {})), tuple(chunk.get("usage") or {}))


CHAT = {
    "model": "default",
    "messages": [{"role": "user", "content": "Q: What is speculative decoding?\nA:"}],
    "max_tokens": 64,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
}


async def test_chat_stream_matches_the_capture(spec):
    status, raw = await post_raw(spec.url + "/v1/chat/completions", CHAT)
    assert status == 200
    mine = [orjson.loads(p) for p in events(raw)]
    real = captured("v1/chat")
    assert (
        shape(mine[0]) == shape(real[0]) and mine[0]["choices"][0]["delta"] == real[0]["choices"][0]["delta"]
    )
    assert {shape(c) for c in mine[1:-2]} == {shape(real[1])}
    assert shape(mine[-2]) == shape(real[-2]) and mine[-2]["choices"][0]["finish_reason"] == "length"
    assert shape(mine[-1]) == shape(real[-1]) and mine[-1]["choices"] == []
    assert mine[-1]["usage"]["completion_tokens"] == 64
    assert "".join(c["choices"][0]["delta"]["content"] for c in mine[1:-2]).strip()


async def test_continuous_usage_gives_exact_tokens_per_chunk(spec):
    body = dict(CHAT, max_tokens=100, stream_options={"include_usage": True, "continuous_usage_stats": True})
    _, raw = await post_raw(spec.url + "/v1/chat/completions", body)
    chunks = [orjson.loads(p) for p in events(raw)]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert all(list(c["usage"]) == list(chunks[-1]["usage"]) for c in content)
    cumulative = [c["usage"]["completion_tokens"] for c in content]
    deltas = [b - a for a, b in zip([0, *cumulative], cumulative, strict=False)]
    assert sum(deltas) == chunks[-1]["usage"]["completion_tokens"] == 100
    assert (
        deltas[0] == 1 and max(deltas) > 1
    )  # the prefill token, then k+1 per verify step (or more if coalesced)


async def test_completions_stream_matches_the_capture(spec):
    body = {
        "model": "default",
        "prompt": "import numpy as np\n\ndef softmax(x):\n",
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    _, raw = await post_raw(spec.url + "/v1/completions", body)
    mine, real = [orjson.loads(p) for p in events(raw)], captured("v1/completions")
    assert {shape(c) for c in mine[:-1]} == {shape(real[0])}
    assert (
        mine[-2]["choices"][0]["finish_reason"] == "length" and mine[0]["choices"][0]["finish_reason"] is None
    )
    assert shape(mine[-1]) == shape(real[-1])  # exclude_none usage chunk: no prompt_tokens_details


async def test_generate_stream_meta_info_matches_the_capture(spec):
    body = {
        "text": "The three most important ideas in distributed systems are",
        "sampling_params": {"temperature": 0, "max_new_tokens": 128, "ignore_eos": True},
        "stream": True,
    }
    _, raw = await post_raw(spec.url + "/generate", body)
    mine, real = [orjson.loads(p) for p in events(raw)], captured("generate")
    assert list(mine[0]["meta_info"]) == list(real[0]["meta_info"])
    assert {tuple(c["meta_info"]) for c in mine[1:-1]} == {tuple(real[1]["meta_info"])}
    assert list(mine[-1]["meta_info"]) == list(real[-1]["meta_info"])
    meta = mine[-1]["meta_info"]
    assert meta["completion_tokens"] == 128 == len(mine[-1]["output_ids"])
    assert meta["spec_accept_length"] == pytest.approx(128 / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
    assert (
        sum(meta["spec_correct_drafts_histogram"]) == meta["spec_verify_ct"] >= len(mine) - 1
    )  # a chunk a step
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_num_correct_drafts"] / (3 * meta["spec_verify_ct"])
    )
    assert meta["spec_accept_length"] > 2.5  # the good drafter: analytic 3.21


async def test_chat_return_meta_info(spec):
    body = dict(CHAT, stream=False, return_meta_info=True)
    body.pop("stream_options")
    status, raw = await post_raw(spec.url + "/v1/chat/completions", body)
    mine = orjson.loads(raw)
    real = json.loads((FIX / "probe-eagle3.json").read_text())["chat_meta_info"]["json"]
    assert status == 200 and list(mine) == list(real) and list(mine["choices"][0]) == list(real["choices"][0])
    assert list(mine["choices"][0]["meta_info"]) == list(real["choices"][0]["meta_info"])
    status, raw = await post_raw(spec.url + "/v1/chat/completions", dict(CHAT, return_meta_info=True))
    assert status == 400 and orjson.loads(raw) == {
        "object": "error",
        "message": "return_meta_info is not supported with streaming. Please set stream=false "
        "when using return_meta_info=true.",
        "type": "BadRequest",
        "param": None,
        "code": 400,
    }


async def test_server_info_flush_and_cumulative_accept_length(spec):
    status, body = http(spec.url + "/flush_cache?timeout=30", "POST")  # waits for earlier requests to drain
    assert status == 200 and body.decode() == (
        "Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will "
        "not be performed.)\n"
    )
    info = json.loads(http(spec.url + "/get_server_info")[1])
    real = json.loads((FIX / "probe-eagle3.json").read_text())["after/get_server_info"]["json"]
    assert set(real) <= set(info) and info["version"] == "0.5.15.post1"
    assert (
        info["speculative_algorithm"],
        info["speculative_num_steps"],
        info["speculative_eagle_topk"],
        info["speculative_num_draft_tokens"],
        info["max_running_requests"],
    ) == ("EAGLE3", 3, 1, 4, 48)
    state = info["internal_states"][0]
    assert set(real["internal_states"][0]) - {"avg_spec_accept_length"} <= set(state)
    assert "avg_spec_accept_length" not in state  # flushed: no window closed since
    await post_raw(spec.url + "/v1/chat/completions", dict(CHAT, stream=False, max_tokens=200))
    state = json.loads(http(spec.url + "/server_info")[1])["internal_states"][0]
    assert 2.0 < state["avg_spec_accept_length"] < 4.0 and state["last_gen_throughput"] > 0
    assert (
        "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
        "Please use '/server_info' instead." in spec.text()
    )
    assert "Cache flushed successfully!" in spec.text()


async def test_flush_refused_while_busy(spec):
    async with aiohttp.ClientSession() as s:
        body = dict(CHAT, max_tokens=8000, ignore_eos=True)  # seconds of decoding even at this time scale
        async with s.post(spec.url + "/v1/chat/completions", json=body) as r:
            await r.content.readline()  # the stream is running
            status, body = http(spec.url + "/flush_cache")
    assert status == 400 and body == b"Flush cache failed.\n"
    assert (
        "Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1" in spec.text()
    )


async def test_metrics_and_model_endpoints(spec):
    text = http(spec.url + "/metrics")[1].decode()
    real = (FIX / "metrics-eagle3.txt").read_text()
    for name in (
        "spec_accept_length",
        "spec_accept_rate",
        "gen_throughput",
        "num_running_reqs",
        "num_queue_reqs",
        "token_usage",
        "prompt_tokens_total",
        "generation_tokens_total",
        "num_requests_total",
        "time_to_first_token_seconds",
        "e2e_request_latency_seconds",
    ):
        help_line = next(x for x in real.splitlines() if x.startswith(f"# HELP sglang:{name} "))
        assert help_line in text.splitlines()
    labels = 'engine_type="unified",model_name="{}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    assert f"sglang:spec_num_draft_tokens{{{labels.format(spec_model_path(spec))}}} 4.0" in text
    real_info = json.loads((FIX / "probe-eagle3.json").read_text())
    assert list(json.loads(http(spec.url + "/get_model_info")[1])) == list(
        real_info["before/get_model_info"]["json"]
    )
    models = json.loads(http(spec.url + "/v1/models")[1])
    assert list(models["data"][0]) == list(real_info["before/v1/models"]["json"]["data"][0])
    assert http(spec.url + "/no/such/route") == (404, b'{"detail":"Not Found"}')


def spec_model_path(server: Server) -> str:
    return json.loads(http(server.url + "/model_info")[1])["model_path"]


async def test_baseline_is_lossless_against_spec_and_checks_api_key(spec, base):
    body = {"text": "def fibonacci(n):", "sampling_params": {"temperature": 0, "max_new_tokens": 48}}
    _, a = await post_raw(spec.url + "/generate", body)
    status, b = await post_raw(base.url + "/generate", body, headers={"Authorization": "Bearer sekret"})
    assert status == 200 and orjson.loads(a)["output_ids"] == orjson.loads(b)["output_ids"]
    assert (
        "spec_verify_ct" not in orjson.loads(b)["meta_info"]
        and "queue_time" not in orjson.loads(b)["meta_info"]
    )
    assert await post_raw(base.url + "/generate", body) == (401, b'{"error":"Unauthorized"}')
    assert http(base.url + "/metrics")[0] == 404  # no --enable-metrics


def test_startup_sequence_and_shutdown(models):
    server = launch(
        models,
        "lifecycle",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(models / "good"),
        "--tp-size",
        "2",
    )
    rc = stop(server)
    text = server.text()
    expected = [
        r"UserWarning: 'python -m sglang\.launch_server' is still supported",
        r"\] Max running requests is reset to 48 for speculative decoding",
        r"\] server_args=ServerArgs\(model_path='.*', tokenizer_path=",
        r"\[[\d :-]+ TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLM, avail mem=",
        r"\[[\d :-]+ TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLMEagle3, avail mem=",
        r"TP0\] KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: \d+\.\d\d GB",
        r"TP0\] Capture target verify CUDA graph begin\. backend=full, num_tokens_per_bs=8, bs=\[1, 2, 3,",
        r"TP0\] max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        r"max_running_requests=48, context_len=8192",
        r"\] INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)",
        r'\] INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK',
        r"\] The server is fired up and ready to roll!",
        r'\] INFO:     127\.0\.0\.1:\d+ - "GET /health_generate HTTP/1\.1" 200 OK',
        r"\] SIGTERM received\. signum=None frame=None\. Draining requests and shutting down\.\.\.",
        r"\] Sleeping 5 seconds before crash diagnostics to let GPU activity settle\.",
    ]
    pos = 0
    for pattern in expected:
        m = re.compile(pattern).search(text, pos)
        assert m, f"{pattern!r} not found after offset {pos} in:\n{text[pos : pos + 2000]}"
        pos = m.end()
    assert rc == -signal.SIGKILL


def test_eagle2_checkpoint_under_eagle3_crashes_at_startup(models):
    server = launch(
        models,
        "crash",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(models / "eagle2"),
        wait=False,
    )
    rc = server.proc.wait(timeout=60)
    text = server.text()
    assert rc != 0 and "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in text
    assert "fired up" not in text


def test_eagle_flag_on_an_eagle3_checkpoint_never_accepts(models):
    """No error, as in real SGLang: the drafts are just never right (accept len exactly 1.00)."""
    server = launch(
        models,
        "wrong-flag",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        str(models / "same-width"),
        "--decode-log-interval",
        "2",
    )
    try:
        body = {
            "text": "hello",
            "sampling_params": {"temperature": 0, "max_new_tokens": 20, "ignore_eos": True},
        }
        status, raw = http_post(server.url + "/generate", body)
        meta = orjson.loads(raw)["meta_info"]
    finally:
        stop(server)
    assert status == 200 and meta["spec_num_correct_drafts"] == 0 and meta["spec_verify_ct"] == 19
    decode = [x for x in server.text().splitlines() if "Decode batch" in x]
    assert decode and all("accept len: 1.00, accept rate: 0.00" in x for x in decode)


async def test_many_concurrent_streams(base):
    async def one(s: aiohttp.ClientSession, i: int) -> int:
        body = dict(
            CHAT,
            max_tokens=16,
            messages=[{"role": "user", "content": f"question {i}"}],
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
        async with s.post(
            base.url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sekret"}
        ) as r:
            chunks = [orjson.loads(p) for p in events(await r.read())]
        last_content = [c for c in chunks if c["choices"] and "usage" in c][-1]
        assert last_content["usage"]["completion_tokens"] == chunks[-1]["usage"]["completion_tokens"]
        return chunks[-1]["usage"]["completion_tokens"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        counts = await asyncio.gather(*(one(s, i) for i in range(256)))
    assert counts == [16] * 256
    batched = re.findall(r"Prefill batch, #new-seq: (\d+), .* #running-req: (\d+),", base.text())
    assert max(int(new) + int(running) for new, running in batched) > 1  # they shared batches


async def test_openai_errors_use_sglang_bodies(spec):
    status, raw = await post_raw(spec.url + "/v1/chat/completions", dict(CHAT, messages=[]))
    assert status == 400 and orjson.loads(raw) == {
        "object": "error",
        "message": "Messages cannot be empty.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    long = dict(CHAT, messages=[{"role": "user", "content": "word " * 9000}])
    status, raw = await post_raw(spec.url + "/v1/chat/completions", long)
    err = orjson.loads(raw)
    assert status == 400 and err["type"] == "BadRequestError"
    assert err["message"].endswith("tokens) is longer than the model's context length (8192 tokens).")


async def test_generate_validation_errors_follow_the_stream_mode(spec):
    """tokenizer_manager's ValueError: a 400 body without streaming; inside the 200 stream with it."""
    body = {"text": "hello", "sampling_params": {"max_new_tokens": -1}}
    status, raw = await post_raw(spec.url + "/generate", body)
    assert status == 400 and orjson.loads(raw) == {
        "error": {"message": "max_new_tokens must be at least 0, got -1."}
    }
    status, raw = await post_raw(spec.url + "/generate", dict(body, stream=True))
    assert status == 200 and [orjson.loads(p) for p in events(raw)] == [
        {
            "error": {
                "message": "max_new_tokens must be at least 0, got -1.",
                "type": "invalid_request_error",
                "code": 400,
                "retryable": False,
            }
        }
    ]
    assert "[http_server] Error: max_new_tokens must be at least 0, got -1." in spec.text()
