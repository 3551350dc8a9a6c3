"""The clients draftbench's is measured against, each as one async request function.

`sglang_chat` and `vllm_chat` reproduce (they do not copy) the streaming request functions of the two
projects' serving benchmarks, with the same per-chunk work, so their ingest cost can be measured here
without installing either project:

* SGLang 0.5.15.post1, `python/sglang/benchmark/serving.py::async_request_openai_chat_completions`
  (run by `python -m sglang.bench_serving --backend sglang-oai-chat`): a new aiohttp ClientSession per
  request (read_bufsize 10 MiB, 6 h total timeout); body `messages`, `max_completion_tokens`, `stream`,
  `temperature: 0.0`, `ignore_eos: true`, no stream_options; the response is read line by line
  (`async for line in response.content`), each line stripped, decoded, `data: ` removed, parsed with the
  stdlib `json.loads`; one `time.perf_counter()` per chunk that has content (reasoning + content),
  taken after parsing; the first gives `ttft`, the next ones `itl` gaps.
* vLLM (main, `vllm/benchmarks/lib/endpoint_request_func.py::async_request_openai_chat_completions`
  with its `StreamedResponseHandler`): one shared ClientSession (TCPConnector limit = concurrency,
  keep-alive); body with `stream_options.include_usage`; reads with `iter_any()`, strips each read,
  decodes it with an incremental UTF-8 decoder into a str buffer, splits complete events at blank lines
  and treats a trailing `data: ` line as complete when it parses as JSON; per event one
  `time.perf_counter()` then `json.loads`; every chunk with choices (role and finish chunks included)
  advances ttft / itl.

`openai_parsed` is the openai SDK's own parsed stream (a pydantic model per chunk) with its default
httpx2 transport, and `null_stream` a raw socket reader that only finds the end of each response: the
ceiling of what the server and loopback can deliver to one core.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

SIX_HOURS = 6 * 60 * 60


@dataclass
class BenchOutput:
    """The fields of both projects' RequestFuncOutput that the measurement needs."""

    success: bool = False
    error: str = ""
    start_time: float = 0.0
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    generated_text: str = ""
    output_len: int = 0

    def chunk_times(self) -> list[float]:
        """Absolute perf_counter of every chunk the client timed (first, then each ITL gap)."""
        if not self.success or self.ttft == 0.0:
            return []
        t = self.start_time + self.ttft
        out = [t]
        for gap in self.itl:
            t += gap
            out.append(t)
        return out


# ------------------------------------------------------------------ SGLang 0.5.15 bench_serving

def _strip_data_prefix(s: str) -> str:
    return s[6:] if s.startswith("data: ") else s


async def sglang_chat(api_url: str, model: str, prompt: str, output_len: int) -> BenchOutput:
    out = BenchOutput()
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}],
               "max_completion_tokens": output_len, "stream": True, "temperature": 0.0, "ignore_eos": True}
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SIX_HOURS),
                                    read_bufsize=10 * 1024**2)
    async with session:
        text = ""
        ttft = 0.0
        n_tokens = output_len
        latency = 0.0
        st = time.perf_counter()
        out.start_time = st
        last = st
        try:
            async with session.post(url=api_url, json=payload, headers={}) as response:
                if response.status != 200:
                    out.error = f"{response.reason}: {await response.text()}"
                    return out
                async for raw_line in response.content:
                    raw_line = raw_line.strip()
                    if not raw_line:
                        continue
                    event = _strip_data_prefix(raw_line.decode("utf-8"))
                    latency = time.perf_counter() - st
                    if event == "[DONE]":
                        continue
                    data = json.loads(event)
                    n_tokens = (data.get("usage") or {}).get("completion_tokens", n_tokens)
                    choices = data.get("choices") or []
                    if not choices:
                        continue
                    delta = choices[0].get("delta") or {}
                    content = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
                    if not content:
                        continue
                    now = time.perf_counter()
                    if ttft == 0.0:
                        ttft = now - st
                        out.ttft = ttft
                    else:
                        out.itl.append(now - last)
                    last = now
                    text += content
                out.generated_text, out.success, out.output_len = text, True, n_tokens
                out.latency = latency
        except Exception as exc:  # the original records any exception as a failed request
            out.error = repr(exc)
    return out


# ------------------------------------------------------------------ vLLM bench serve

class VllmEventBuffer:
    """Behaviour of vLLM's StreamedResponseHandler: str buffer, blank-line split, JSON-probe of a tail."""

    def __init__(self) -> None:
        self.pending = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def push(self, raw: bytes) -> list[str]:
        self.pending += self.decoder.decode(raw)
        ready = []
        while "\n\n" in self.pending:
            message, self.pending = self.pending.split("\n\n", 1)
            message = message.strip()
            if message:
                ready.append(message)
        if self.pending.startswith("data: "):
            body = self.pending.removeprefix("data: ").strip()
            if body == "[DONE]":
                ready.append(self.pending.strip())
                self.pending = ""
            elif body:
                try:
                    json.loads(body)
                except json.JSONDecodeError:
                    pass  # incomplete: wait for the next read
                else:
                    ready.append(self.pending.strip())
                    self.pending = ""
        return ready


def vllm_session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=300,
                                     use_dns_cache=True, keepalive_timeout=60, enable_cleanup_closed=True,
                                     force_close=False, ssl=False)
    return aiohttp.ClientSession(connector=connector, trust_env=True,
                                 timeout=aiohttp.ClientTimeout(total=SIX_HOURS))


async def vllm_chat(session: aiohttp.ClientSession, api_url: str, model: str, prompt: str,
                    output_len: int) -> BenchOutput:
    out = BenchOutput()
    payload = {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
               "max_completion_tokens": output_len, "stream": True, "stream_options": {"include_usage": True}}
    text = ""
    st = time.perf_counter()
    out.start_time = st
    last = st
    first = False
    try:
        async with session.post(url=api_url, json=payload,
                                headers={"Content-Type": "application/json"}) as response:
            if response.status != 200:
                out.error = response.reason or ""
                return out
            events = VllmEventBuffer()
            async for raw in response.content.iter_any():
                raw = raw.strip()
                if not raw:
                    continue
                for message in events.push(raw):
                    if message.startswith(":"):
                        continue
                    body = message.removeprefix("data: ")
                    if body == "[DONE]":
                        continue
                    now = time.perf_counter()
                    data = json.loads(body)
                    if choices := data.get("choices"):
                        content = choices[0]["delta"].get("content")
                        if not first:
                            first = True
                            out.ttft = now - st
                        else:
                            out.itl.append(now - last)
                        text += content or ""
                        last = now
                    elif usage := data.get("usage"):
                        out.output_len = usage.get("completion_tokens")
        out.generated_text = text
        out.success = first
        if not first:
            out.error = "Never received a valid chunk to calculate TTFT."
    except Exception as exc:
        out.error = repr(exc)
    return out


# ------------------------------------------------------------------ references

async def openai_parsed(client: Any, model: str, prompt: str, output_len: int) -> tuple[list[float], str]:
    """The SDK's parsed stream: (arrival time of each content chunk, text)."""
    times: list[float] = []
    parts: list[str] = []
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=output_len, stream=True,
        stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
            parts.append(chunk.choices[0].delta.content)
    return times, "".join(parts)


async def null_stream(host: str, port: int, output_len: int, deadline: float) -> int:
    """Back-to-back requests on one keep-alive connection until `deadline`, reading raw bytes and
    parsing nothing; returns the number of complete responses."""
    reader, writer = await asyncio.open_connection(host, port)
    body = orjson.dumps({"model": "default", "messages": [{"role": "user", "content": "x"}],
                         "max_tokens": output_len, "stream": True,
                         "stream_options": {"include_usage": True}})
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % (host.encode(), len(body))) + body
    done = 0
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            last = b""
            while not last.endswith(b"\r\n0\r\n\r\n"):
                data = await reader.read(1 << 18)
                if not data:
                    raise ConnectionError("server closed the connection")
                last = (last + data)[-7:]
            done += 1
    finally:
        writer.close()
    return done
