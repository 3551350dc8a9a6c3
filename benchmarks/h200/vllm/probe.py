"""Ask a running `vllm serve` what draftbench reads from it, and keep its answers verbatim (stdlib only;
run by `vllm.sh smoke` on the H200 machine). Files under --out:
  probe.json        /health, /version, /v1/models, /server_info and /reset_prefix_cache (dev mode), one
                    non-streamed chat completion, each with its status and body
  sse.txt           every line of one streamed chat completion: `sse<TAB>seconds since send<TAB>line`
  metrics-before.txt, metrics-after.txt   /metrics around the requests
  summary.txt       one line per check
  python probe.py --port 8000 --model NAME --out DIR
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from pathlib import Path


def call(
    port: int, method: str, path: str, body: dict | None = None, timeout: float = 120
) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    except OSError as exc:
        return 0, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def stream(port: int, body: dict, timeout: float = 300) -> list[tuple[float, str]]:
    """Every SSE line with its arrival time (seconds after the request was sent)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    lines.append((time.perf_counter() - t0, f"HTTP {resp.status}"))
    while True:
        raw = resp.fp.readline()
        if not raw:
            break
        lines.append((time.perf_counter() - t0, raw.decode(errors="replace").rstrip("\r\n")))
    conn.close()
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    found: dict[str, object] = {}
    summary: list[str] = []
    for path in ("/health", "/version", "/v1/models", "/server_info"):
        status, body = call(a.port, "GET", path)
        found[path] = {"status": status, "body": body[:20000]}
        summary.append(f"GET {path}: {status}")
    status, before = call(a.port, "GET", "/metrics")
    (a.out / "metrics-before.txt").write_text(before)
    status, body = call(a.port, "POST", "/reset_prefix_cache")
    found["POST /reset_prefix_cache"] = {"status": status, "body": body[:2000]}
    summary.append(f"POST /reset_prefix_cache: {status}")
    messages = [{"role": "user", "content": "def fibonacci(n):"}]
    req = {"model": a.model, "messages": messages, "max_tokens": a.max_tokens, "temperature": 0.0,
           "ignore_eos": True, "stream": True,
           "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    lines = stream(a.port, req)
    (a.out / "sse.txt").write_text("".join(f"sse\t{t:.6f}\t{line}\n" for t, line in lines))
    data = [ln for _, ln in lines if ln.startswith("data: ")]
    summary.append(f"stream: {lines[0][1]}, {len(data)} data lines, [DONE] {'data: [DONE]' in data}")
    # non-streamed: without stream_options, which vLLM refuses (400) unless stream is true (the 2026-12-03
    # and 2026-12-04 smokes sent it and got that 400, now the vLLM stand-in's answer too)
    plain = {k: v for k, v in req.items() if k != "stream_options"}
    status, body = call(a.port, "POST", "/v1/chat/completions", dict(plain, stream=False))
    found["POST /v1/chat/completions"] = {"status": status, "body": body[:20000]}
    try:
        usage = json.loads(body).get("usage")
    except ValueError:
        usage = None
    summary.append(f"chat completion: {status}, usage {usage}")
    status, after = call(a.port, "GET", "/metrics")
    (a.out / "metrics-after.txt").write_text(after)
    spec = [ln for ln in after.splitlines() if ln.startswith("vllm:spec_decode")]
    summary.append(f"/metrics: {status}, {len(spec)} vllm:spec_decode lines")
    (a.out / "probe.json").write_text(json.dumps(found, indent=1))
    (a.out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(f"[probe] {s}" for s in summary))
    ok = found["/health"]["status"] == 200 and lines[0][1] == "HTTP 200" and "data: [DONE]" in data  # type: ignore[index]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
