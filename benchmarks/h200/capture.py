"""Capture what a real SGLang server sends for the cases the stand-in must match (docs/real-gpu.md):
SSE with continuous usage, error bodies. Output lines: tag<TAB>seconds<TAB>raw line (as captures/sse-*.txt).

python3 benchmarks/h200/capture.py PORT OUT_FILE
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


def post(port: int, path: str, body: dict, tag: str, out) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        resp = urllib.request.urlopen(req, timeout=120)
        out.write(f"{tag}\t0\tHTTP {resp.status} {resp.headers.get('content-type')}\n")
    except urllib.error.HTTPError as exc:
        resp = exc
        out.write(f"{tag}\t0\tHTTP {exc.code} {exc.headers.get('content-type')}\n")
    for raw in resp:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        out.write(f"{tag}\t{time.perf_counter() - t0:.6f}\t{line}\n")


def main(port: int, path: str) -> None:
    msgs = [{"role": "user", "content": "Count from one to twenty in words."}]
    with open(path, "w") as out:
        post(port, "/v1/chat/completions",
             {"model": "default", "messages": msgs, "max_tokens": 24, "stream": True,
              "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
             "chat-continuous", out)
        post(port, "/v1/completions", {"model": "default", "prompt": "Once upon a time", "max_tokens": 24,
             "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
             "completions-continuous", out)
        post(port, "/v1/chat/completions",
             {"model": "default", "messages": msgs, "max_tokens": 8, "stream": True,
              "return_spec_tokens_details": True, "stream_options": {"include_usage": True}},
             "chat-spec-details", out)
        post(port, "/v1/chat/completions", {"model": "default", "messages": msgs, "max_tokens": -1},
             "err-max-tokens", out)
        post(port, "/v1/chat/completions",
             {"model": "default", "messages": msgs, "max_tokens": 8, "stream": True,
              "return_meta_info": True}, "err-stream-meta-info", out)
        post(port, "/v1/chat/completions", {"model": "default", "messages": [], "max_tokens": 8},
             "err-empty-messages", out)
        post(port, "/v1/chat/completions", {"model": "default", "messages": msgs, "max_tokens": 100000},
             "err-too-long", out)
        post(port, "/v1/nonexistent", {}, "err-404", out)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
