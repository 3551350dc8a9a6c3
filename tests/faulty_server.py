"""A tiny OpenAI-compatible server that misbehaves on request, for the fault tests.

Launched like SGLang (`python tests/faulty_server.py <launch_server flags>`): it binds --host/--port and
ignores every other flag, answers the admin endpoints the runner uses, and streams chat completions in
SGLang's framing (role chunk, content chunks with cumulative usage, finish chunk, usage chunk, [DONE]),
one token per content chunk, `max_tokens` tokens. The last user message picks a fault:

  FAIL_ONCE    500 on odd attempts (the first of each phase), a normal stream on even ones
  FAIL_ALWAYS  500
  MALFORMED    a few chunks, then an event whose JSON is broken
  RESET        a few chunks, then the socket is aborted mid-stream
  RESET_ONCE   like RESET on odd attempts, a normal stream on even ones (tokens must be counted once)
  HANG         a few chunks, then nothing until the client gives up
  USAGE=JSON   a normal stream whose final usage says completion_tokens JSON ("abc", [8], -1, 1e308, ...)
  FINISH=WORD  a normal stream whose finish_reason is WORD ("abort")

Attempts are counted per prompt text and logged ("chat attempt N: TEXT"), so tests can count what the
server really received. `--never-healthy` answers 503 on the health endpoints forever. The environment
variable FAULTY_ECHO_ENV names variables whose values are printed to the log at startup, and the flags
are logged as SGLang logs its server_args: a server that leaks secrets into its log.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import Counter
from typing import Any

import orjson
from aiohttp import web

from harness.sim.sglang.responses import chat_chunk

READY_LINE = "The server is fired up and ready to roll!"
FAULTS = ("FAIL_ONCE", "FAIL_ALWAYS", "MALFORMED", "RESET_ONCE", "RESET", "HANG")
MODEL = "faulty-model"


def log(msg: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", flush=True)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(
    rid: str,
    *,
    content: str | None = None,
    role: str | None = None,
    finish: str | None = None,
    usage: dict | None = None,
) -> bytes:
    """SGLang's chat chunk, built by the stand-in's own (capture-checked) builder."""
    return chat_chunk(rid, MODEL, role=role, content=content, finish_reason=finish, usage_=usage)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


def fault_of(text: str) -> str | None:
    return next((f for f in FAULTS if f in text), None)


class Faulty:
    def __init__(self, never_healthy: bool):
        self.never_healthy = never_healthy
        self.attempts: Counter[str] = Counter()

    async def health(self, request: web.Request) -> web.Response:
        if self.never_healthy:
            return web.json_response({"error": "still loading"}, status=503)
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": "0.5.15.post1",
                "max_running_requests": 64,
                "internal_states": [{"last_gen_throughput": 100.0}],
            }
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        text = str(body["messages"][-1]["content"])
        self.attempts[text] += 1
        attempt = self.attempts[text]
        fault = fault_of(text)
        log(f"chat attempt {attempt}: {text}")
        odd = attempt % 2 == 1
        if fault == "FAIL_ALWAYS" or (fault == "FAIL_ONCE" and odd):
            error = {
                "object": "error",
                "message": "injected failure",
                "type": "InternalError",
                "param": None,
                "code": 500,
            }
            return web.json_response(error, status=500)
        max_tokens = int(body.get("max_tokens") or 16)
        prompt_tokens = len(text.split())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        rid = f"faulty-{attempt}-{abs(hash(text))}"
        await resp.write(chunk(rid, role="assistant", content=""))
        cut = max(1, max_tokens // 2)  # where a mid-stream fault strikes
        for i in range(1, max_tokens + 1):
            if i == cut and fault == "MALFORMED":
                await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"delta": \n\n')
                return resp
            if i == cut and (fault == "RESET" or (fault == "RESET_ONCE" and odd)):
                assert request.transport is not None
                request.transport.abort()  # RST, not a clean close: the client sees a reset
                return resp
            if i == cut and fault == "HANG":
                await asyncio.sleep(3600)
            await resp.write(chunk(rid, content=f"t{i} ", usage=usage(prompt_tokens, i)))
            await asyncio.sleep(0.002)
        finish = re.search(r"FINISH=(\S+)", text)
        await resp.write(chunk(rid, content="", finish=finish.group(1) if finish else "length"))
        final: dict[str, Any] = usage(prompt_tokens, max_tokens)
        bad = re.search(r"USAGE=(\S+)", text)
        if bad:
            final["completion_tokens"] = orjson.loads(bad.group(1))
        await resp.write(
            sse(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": MODEL,
                    "choices": [],
                    "usage": final,
                }
            )
        )
        await resp.write(b"data: [DONE]\n\n")
        return resp


@web.middleware
async def access_log(request: web.Request, handler: Any) -> web.StreamResponse:
    resp = await handler(request)
    peer = request.transport.get_extra_info("peername") if request.transport else None
    where = f"{peer[0]}:{peer[1]}" if peer else "-"
    log(f'INFO:     {where} - "{request.method} {request.path} HTTP/1.1" {resp.status}')
    return resp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="faulty_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--never-healthy", action="store_true")
    args, _ignored = parser.parse_known_args(argv)
    log(f"server_args={argv}")  # as SGLang logs its ServerArgs, --api-key included
    for name in filter(None, os.environ.get("FAULTY_ECHO_ENV", "").split(",")):
        log(f"environment: {name}={os.environ.get(name, '')}")
    faulty = Faulty(args.never_healthy)
    app = web.Application(middlewares=[access_log])
    app.router.add_get("/health", faulty.health)
    app.router.add_get("/health_generate", faulty.health)
    app.router.add_get("/v1/models", faulty.models)
    app.router.add_post("/flush_cache", faulty.flush_cache)
    app.router.add_get("/get_server_info", faulty.server_info)
    app.router.add_get("/server_info", faulty.server_info)
    app.router.add_post("/v1/chat/completions", faulty.chat)

    async def announce(_app: web.Application) -> None:
        if not args.never_healthy:
            log(READY_LINE)

    app.on_startup.append(announce)
    log(f"faulty server on {args.host}:{args.port}" + (" (never healthy)" if args.never_healthy else ""))
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, shutdown_timeout=1.0)
    log("shut down")


if __name__ == "__main__":
    main(sys.argv[1:])
