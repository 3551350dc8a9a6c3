"""The stand-in against the draftbench run on a real SGLang 0.5.15.post1 (H200, Llama-8B shape, dummy
weights).

Three stand-ins are launched with the exact argv draftbench used on the GPU (`draftbench-run/variants.jsonl`):
baseline, EAGLE3 and the wrong flag (EAGLE on an EAGLE-3 draft). Each is driven the way draftbench drove the
real servers (poll /health_generate, /get_server_info, /v1/models, a chat stream, /flush_cache, another chat,
/get_server_info, SIGTERM); the EAGLE3 one also answers the cases of `sse-extra-eagle3.txt`. The fixture
does all the I/O; the tests compare what came back and the logs with the captures.
"""

from __future__ import annotations

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.sim.sglang.fixtures import write_target_model

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
RUN = FIX / "draftbench-run"
# The warm-up window (1 s x scale, then a quarter of the start-up time) is long enough for the health poll
# to see 503 before 200, as draftbench did on the GPU.
ENV = {"DRAFTBENCH_SIM_TIME_SCALE": "0.05", "DRAFTBENCH_SIM_STARTUP_S": "0.8"}
VARIANTS = ("baseline", "eagle3", "wrong-flag-eagle")
REAL_TARGET, REAL_DRAFT = "/repo/.devbundle/models/target", "/repo/.devbundle/models/draft"
# The GPU run's draft directory: an EAGLE-3 config.json only (no generation_config.json).
DRAFT_CONFIG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05,
    "vocab_size": 320,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "dtype": "bfloat16",
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "tie_word_embeddings": False,
    "target_hidden_size": 4096,
    "draft_vocab_size": 320,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
}
MESSAGES = [{"role": "user", "content": "Explain speculative decoding to a new engineer in two sentences."}]


# --- the captures -------------------------------------------------------------------------------------------


@dataclass
class Case:
    status: int
    content_type: str
    raw: list[str] = field(default_factory=list)  # non-blank raw lines: SSE `data: ...` lines or a JSON body


def captured_cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for line in (FIX / "sse-extra-eagle3.txt").read_text().splitlines():
        tag, _, raw = line.split("\t", 2)
        if raw.startswith("HTTP "):
            _, status, ctype = raw.split(" ", 2)
            cases[tag] = Case(int(status), ctype)
        elif raw:
            cases[tag].raw.append(raw)
    return cases


CAPTURED = captured_cases()
STREAM_CASES = ("chat-continuous", "completions-continuous", "chat-spec-details")
ERROR_CASES = ("err-max-tokens", "err-stream-meta-info", "err-empty-messages", "err-too-long", "err-404")


def real_log(variant: str) -> list[str]:
    return gzip.decompress((RUN / f"server-{variant}.log.gz").read_bytes()).decode().split("\n")


def real_argv(variant: str) -> list[str]:
    for line in (RUN / "variants.jsonl").read_text().splitlines():
        v = json.loads(line)
        if v["variant"] == variant:
            assert v["launch_command"][:3] == ["python3", "-m", "sglang.launch_server"]
            return v["launch_command"][3:]
    raise KeyError(variant)


def events(raw: list[str]) -> list[Any]:
    """Decoded `data:` payloads; "[DONE]" stays a string."""
    assert all(x.startswith("data: ") for x in raw), raw
    return [x[6:] if x == "data: [DONE]" else json.loads(x[6:]) for x in raw]


# --- driving the stand-ins ----------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes


def request(url: str, body: dict | None = None, method: str | None = None) -> Reply:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method=method or ("POST" if data else "GET"),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return Reply(r.status, r.headers.get("Content-Type", ""), r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.headers.get("Content-Type", ""), e.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Run:
    variant: str
    url: str
    proc: subprocess.Popen
    log_path: Path
    paths: dict[str, str]  # model directories -> TARGET / DRAFT, as in the real logs
    replies: dict[str, Reply] = field(default_factory=dict, repr=False)
    log: list[str] = field(default_factory=list, repr=False)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")


def launch(tmp: Path, variant: str) -> Run:
    argv = real_argv(variant)
    port = free_port()
    swap = {REAL_TARGET: str(tmp / "target"), REAL_DRAFT: str(tmp / "draft")}
    argv = [swap.get(a, a) for a in argv]
    argv[argv.index("--port") + 1] = str(port)
    log_path = tmp / f"{variant}.log"
    with open(log_path, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.sim", *argv],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV},
            start_new_session=True,
        )
    return Run(
        variant,
        f"http://127.0.0.1:{port}",
        proc,
        log_path,
        {str(tmp / "target"): "TARGET", str(tmp / "draft"): "DRAFT"},
    )


def wait_healthy(run: Run) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert run.proc.poll() is None, run.text()
        try:
            if request(run.url + "/health_generate").status == 200:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.02)  # draftbench polls too; a short pause keeps the 503 lines few
    raise TimeoutError(f"{run.variant}: not healthy within 60 s:\n{run.text()}")


def stream_body(case: str) -> tuple[str, dict]:
    """The request behind each captured stream; max_tokens is what the capture generated."""
    final_usage = events(CAPTURED[case].raw)[-2]["usage"]
    n = final_usage["completion_tokens"]
    if case == "completions-continuous":
        return "/v1/completions", {
            "model": "default",
            "prompt": "def fibonacci(n):",
            "max_tokens": n,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    body = {"model": "default", "messages": MESSAGES, "max_tokens": n, "temperature": 0, "stream": True}
    if case == "chat-continuous":
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    else:  # chat-spec-details: 0.5.15 accepts the field and ignores it
        body.update(stream_options={"include_usage": True}, return_spec_tokens_details=True)
    return "/v1/chat/completions", body


ERROR_REQUESTS: dict[str, tuple[str, dict | None]] = {
    "err-max-tokens": ("/v1/chat/completions", {"model": "default", "messages": MESSAGES, "max_tokens": -1}),
    "err-stream-meta-info": (
        "/v1/chat/completions",
        {"model": "default", "messages": MESSAGES, "stream": True, "return_meta_info": True},
    ),
    "err-empty-messages": ("/v1/chat/completions", {"model": "default", "messages": []}),
    "err-too-long": (
        "/v1/chat/completions",
        {"model": "default", "messages": MESSAGES, "max_tokens": 100000},
    ),
    "err-404": ("/v1/no-such-endpoint", None),
}
HELD_BACK_PROMPTS = ("def fibonacci(n):", "The three laws of motion are", "SELECT name FROM users WHERE")


def drive(run: Run) -> None:
    """What draftbench did against the real server (see the captured logs), plus the capture cases."""
    wait_healthy(run)
    request(run.url + "/get_server_info")
    request(run.url + "/v1/models")
    chat = {"model": "default", "messages": MESSAGES, "max_tokens": 16, "temperature": 0, "stream": True}
    run.replies["chat-1"] = request(run.url + "/v1/chat/completions", chat)
    run.replies["flush"] = request(run.url + "/flush_cache", method="POST")
    run.replies["chat-2"] = request(run.url + "/v1/chat/completions", chat)
    if run.variant == "eagle3":
        for case in STREAM_CASES:
            path, body = stream_body(case)
            run.replies[case] = request(run.url + path, body)
        for case, (path, maybe_body) in ERROR_REQUESTS.items():
            run.replies[case] = request(run.url + path, maybe_body)
        path, body = "/v1/completions", {"model": "default", "prompt": "hi", "max_tokens": -1}
        run.replies["err-max-tokens-completions"] = request(run.url + path, body)
    if run.variant == "baseline":  # one token per step: every held-back token is a step of its own
        opts = {"include_usage": True, "continuous_usage_stats": True}
        for i, prompt in enumerate(HELD_BACK_PROMPTS):
            common = {"model": "default", "max_tokens": 100, "temperature": 0, "stream": True}
            run.replies[f"held-chat-{i}"] = request(
                run.url + "/v1/chat/completions",
                dict(common, messages=[{"role": "user", "content": prompt}], stream_options=opts),
            )
            run.replies[f"held-completions-{i}"] = request(
                run.url + "/v1/completions", dict(common, prompt=prompt, stream_options=opts)
            )
    request(run.url + "/get_server_info")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[str, Run]]:
    tmp = tmp_path_factory.mktemp("real")
    write_target_model(
        tmp / "target", hidden_size=4096, num_layers=32, vocab_size=320, max_position_embeddings=8192
    )
    (tmp / "target" / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}\n')
    (tmp / "draft").mkdir()
    (tmp / "draft" / "config.json").write_text(json.dumps(DRAFT_CONFIG))
    started = {v: launch(tmp, v) for v in VARIANTS}
    try:
        with ThreadPoolExecutor(len(started)) as pool:
            for future in [pool.submit(drive, r) for r in started.values()]:
                future.result()
    finally:
        for r in started.values():
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        for r in started.values():
            r.proc.wait(timeout=30)
            r.log = r.log_path.read_bytes().decode(errors="replace").split("\n")
    yield started


# --- SSE streams --------------------------------------------------------------------------------------------


def sse_events(reply: Reply) -> list[Any]:
    """Split an SSE body; every event must be exactly `data: <payload>` and a blank line, compact JSON."""
    raw = reply.body.decode()
    assert raw.endswith("\n\n"), raw[-200:]
    parts = raw[:-2].split("\n\n")
    assert all("\n" not in p for p in parts)
    payloads = events(parts)
    for p, obj in zip(parts, payloads, strict=True):  # compact JSON, UTF-8 as is, like the capture
        assert obj == "[DONE]" or p[6:] == json.dumps(obj, separators=(",", ":"), ensure_ascii=False), p
    return payloads


def kind(obj: Any) -> str:
    if obj == "[DONE]":
        return "done"
    if obj["choices"] == []:
        return "usage"
    choice = obj["choices"][0]
    if "delta" not in choice:
        return "text-finish" if choice["finish_reason"] else "text"
    if "role" in choice["delta"]:
        return "role"
    return "finish" if choice["finish_reason"] else "content"


VARYING = {"id", "created", "content", "text"}


def skeleton(obj: Any) -> Any:
    """Key order and every value that does not depend on the sampled text, ids, clocks or token counts."""
    if isinstance(obj, dict):
        return tuple(
            (k, type(v).__name__ if (k in VARYING and v != "") or isinstance(v, int) else skeleton(v))
            for k, v in obj.items()
        )
    if isinstance(obj, list):
        return tuple(skeleton(v) for v in obj)
    return obj


def pattern(chunks: list[Any]) -> list[str]:
    """Chunk kinds with repeats collapsed: e.g. role, content, finish, usage, done."""
    out: list[str] = []
    for c in chunks:
        if not out or out[-1] != kind(c):
            out.append(kind(c))
    return out


@pytest.mark.parametrize("case", STREAM_CASES)
def test_stream_matches_the_capture(runs, case):
    real, reply = CAPTURED[case], runs["eagle3"].replies[case]
    assert (real.status, real.content_type) == (200, "text/event-stream; charset=utf-8")
    assert (reply.status, reply.content_type) == (real.status, real.content_type)
    theirs, mine = events(real.raw), sse_events(reply)
    assert pattern(mine) == pattern(theirs)
    by_kind: dict[str, set] = {}
    for c in theirs:
        by_kind.setdefault(kind(c), set()).add(skeleton(c))
    for c in mine:
        assert skeleton(c) in by_kind[kind(c)], f"{kind(c)} chunk unlike the capture: {c}"
    assert mine[-2]["usage"]["completion_tokens"] == theirs[-2]["usage"]["completion_tokens"]
    assert not any("sglext" in c for c in mine if isinstance(c, dict))


@pytest.mark.parametrize("case", STREAM_CASES)
def test_usage_rules_hold_in_the_capture_and_the_stand_in(runs, case):
    """Cumulative usage on every content chunk (with continuous stats), never on the chat role/finish chunks;
    on every completions chunk incl. the one with finish_reason; chat never sends an empty delta."""
    continuous = case != "chat-spec-details"
    for chunks in (events(CAPTURED[case].raw), sse_events(runs["eagle3"].replies[case])):
        final = chunks[-2]["usage"]
        content = [c for c in chunks if kind(c) in ("content", "text", "text-finish")]
        assert all("usage" not in c for c in chunks if kind(c) in ("role", "finish"))
        if case.startswith("chat"):
            assert all(c["choices"][0]["delta"]["content"] for c in content)
        if not continuous:
            assert all("usage" not in c for c in content)
            continue
        cumulative = [c["usage"]["completion_tokens"] for c in content]
        assert cumulative == sorted(set(cumulative)) and cumulative[-1] == final["completion_tokens"]
        assert all(c["usage"]["prompt_tokens"] == final["prompt_tokens"] for c in content)
        assert all(
            c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + n
            for c, n in zip(content, cumulative, strict=True)
        )


def test_held_back_tokens_chat_skips_them_completions_sends_empty_text(runs):
    """A token whose text the detokenizer holds back: no chat chunk (the next one carries it), but a
    completions chunk with "text": "" (as in the capture)."""
    real = events(CAPTURED["completions-continuous"].raw)
    assert any(c["choices"] and c["choices"][0]["text"] == "" for c in real)
    base = runs["baseline"].replies
    empty_text, carried = 0, 0
    for i in range(len(HELD_BACK_PROMPTS)):
        chat, comp = sse_events(base[f"held-chat-{i}"]), sse_events(base[f"held-completions-{i}"])
        content = [c for c in chat if kind(c) == "content"]
        assert all(c["choices"][0]["delta"]["content"] for c in content)
        steps = [c["usage"]["completion_tokens"] for c in content]
        carried += sum(b - a > 1 for a, b in zip([0, *steps[:-1]], steps, strict=True))
        texts = [c for c in comp if kind(c) in ("text", "text-finish")]
        counts = [c["usage"]["completion_tokens"] for c in texts]
        assert counts == sorted(set(counts)) and counts[-1] == 100
        empty_text += sum(c["choices"][0]["text"] == "" for c in texts)
        assert chat[-2]["usage"]["completion_tokens"] == comp[-2]["usage"]["completion_tokens"] == 100
    assert empty_text > 0 and carried > 0


# --- error bodies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_body_is_byte_for_byte_the_capture(runs, case):
    real, reply = CAPTURED[case], runs["eagle3"].replies[case]
    assert (reply.status, reply.content_type) == (real.status, real.content_type)
    assert reply.body.decode() == real.raw[0]


def test_completions_max_tokens_error_is_the_same_sampling_params_error(runs):
    reply = runs["eagle3"].replies["err-max-tokens-completions"]
    assert (reply.status, reply.content_type) == (400, "application/json")
    assert reply.body.decode() == CAPTURED["err-max-tokens"].raw[0]


# --- logs ---------------------------------------------------------------------------------------------------

TS = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z]+\d+)*\] ")
# Lines of the GPU box's environment, not of SGLang's start-up: missing optional modules (cutlass, FA3,
# openai_harmony, cuda.tile), the byte tokenizer's missing yes/no tokens, a container ulimit, library
# deprecation warnings (with their continuation lines) and tqdm progress output.
ENVIRONMENT = re.compile(
    r"flashinfer\.comm allreduce_fusion|Fail to set RLIMIT_NOFILE|Ignore import error when loading|"
    r"\[devbundle patch\]|OpenAI Responses API \(/v1/responses\) disabled|Using fallback token IDs for "
    r"yes/no|FastAPIDeprecationWarning|UserWarning: tl\.where|Capturing batches|^\s*0%\|"
)
HEALTH_503 = '"GET /health_generate HTTP/N" N Service Unavailable'  # normalised access lines
HEALTH_200 = '"GET /health_generate HTTP/N" N OK'


def clean(lines: list[str], paths: dict[str, str]) -> list[str]:
    """Timestamps and rank tags dropped, model paths named, the environment's lines dropped."""
    out: list[str] = []
    dropping = False
    for line in lines:
        if ENVIRONMENT.search(line):
            dropping = True
            continue
        if dropping and line.startswith("  "):  # the dropped warning's continuation
            continue
        dropping = False
        line = TS.sub("", line.rstrip("\r"))
        for path, name in paths.items():
            line = line.replace(path, name)
        if line:
            out.append(line)
    return out


def normalise(lines: list[str], paths: dict[str, str]) -> list[str]:
    """``clean`` with source locations and numbers replaced and consecutive repeats collapsed."""
    out: list[str] = []
    for line in clean(lines, paths):
        line = re.sub(r"\d+(?:\.\d+)?", "N", re.sub(r"\S+\.py:\d+", "FILE", line))
        if not out or out[-1] != line:
            out.append(line)
    return out


REAL_PATHS = {REAL_TARGET: "TARGET", REAL_DRAFT: "DRAFT"}


def startup(lines: list[str]) -> list[str]:
    """Through the first healthy probe, without the 503 probes (how many depends on the poller)."""
    end = next(i for i, x in enumerate(lines) if HEALTH_200 in x)
    return [x for x in lines[: end + 1] if HEALTH_503 not in x]


@pytest.mark.parametrize("variant", VARIANTS)
def test_startup_sequence_is_the_real_one(runs, variant):
    theirs = startup(normalise(real_log(variant), REAL_PATHS))
    mine = startup(normalise(runs[variant].log, runs[variant].paths))
    assert any(x.startswith("server_args=ServerArgs(") for x in theirs)
    assert "The server is fired up and ready to roll!" in theirs
    assert mine == theirs, "\n".join(f"{a!r}\n   {b!r}" for a, b in zip(theirs, mine, strict=False) if a != b)


@pytest.mark.parametrize("variant", VARIANTS)
def test_health_probe_is_503_until_ready_then_200(runs, variant):
    for lines in (
        normalise(real_log(variant), REAL_PATHS),
        normalise(runs[variant].log, runs[variant].paths),
    ):
        ready = lines.index("The server is fired up and ready to roll!")
        first_200 = next(i for i, x in enumerate(lines) if HEALTH_200 in x)
        assert any(HEALTH_503 in x for x in lines[:ready])
        assert not any(HEALTH_503 in x for x in lines[ready:])
        assert ready < first_200


STREAM_ACCESS = re.compile(r'"POST /v1/(?:chat/)?completions HTTP/1\.1" 200 OK$')


def request_phase_rules(lines: list[str]) -> None:
    """After start-up (``clean`` lines): a stream's access line follows the Prefill line that admitted it
    (SGLang awaits the first output before it sends the headers); the flush and the deprecation lines come
    right before their access lines."""
    admitted = streams = 0
    for i, line in enumerate(lines):
        if m := re.match(r"Prefill batch, #new-seq: (\d+),", line):
            admitted += int(m[1])
        if STREAM_ACCESS.search(line):
            streams += 1
            assert streams <= admitted, f"access line before its Prefill line: {lines[max(0, i - 3) : i + 1]}"
        if line == "Cache flushed successfully!":
            assert '"POST /flush_cache HTTP/1.1" 200 OK' in lines[i + 1]
        if line.startswith("Endpoint '/get_server_info' is deprecated and will be removed"):
            assert '"GET /get_server_info HTTP/1.1" 200 OK' in lines[i + 1]
    assert streams > 0


def after_startup(lines: list[str]) -> list[str]:
    return lines[next(i for i, x in enumerate(lines) if '"GET /health_generate HTTP/1.1" 200' in x) + 1 :]


@pytest.mark.parametrize("variant", VARIANTS)
def test_request_phase_order_is_the_real_one(runs, variant):
    theirs = after_startup(clean(real_log(variant), REAL_PATHS))
    mine = after_startup(clean(runs[variant].log, runs[variant].paths))
    for lines in (theirs, mine):
        assert "Cache flushed successfully!" in lines
        assert any(x.startswith("Endpoint '/get_server_info' is deprecated") for x in lines)
        request_phase_rules(lines)
    assert runs[variant].replies["flush"].status == 200


def test_request_phase_rule_counts_admissions():
    """The rule above can fail: an access line ahead of its Prefill line."""
    access = 'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    prefill = "Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, token usage: 0.00, ..."
    request_phase_rules([prefill, access])
    with pytest.raises(AssertionError, match="access line before its Prefill line"):
        request_phase_rules([access, prefill])


@pytest.mark.parametrize("variant", ["baseline", "eagle3"])
def test_sigterm_shutdown_is_the_real_one(runs, variant):
    """The GPU run's logs end before shutdown; the earlier captures of the same servers have it."""

    def tail(lines: list[str]) -> list[str]:
        start = next(i for i, x in enumerate(lines) if x.startswith("SIGTERM received"))
        return [re.sub(r"Subprocess \w+", "Subprocess X", x) for x in lines[start:]]

    theirs = tail(normalise((FIX / f"server-{variant}.log").read_text().split("\n"), REAL_PATHS))
    mine = tail(normalise(runs[variant].log, runs[variant].paths))
    assert mine == theirs
    assert runs[variant].proc.returncode == -signal.SIGKILL
