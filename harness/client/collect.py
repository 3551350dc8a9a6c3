"""A streamed response as it arrives: the SSE payloads of one request, each with the timestamp of the
network read that carried it, collected into a `StreamResult` (tokens from usage, spec stats, text and
reasoning text). The sending side is harness.client.stream."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import orjson


@dataclass(slots=True)  # declared fields only: an attribute set at run time is an AttributeError
class StreamResult:
    ok: bool
    error: str | None  # "http 500: <body head>", "timeout", "connection reset", "malformed sse: ..."
    http_status: int | None
    t_send: float  # time.perf_counter() just before the request is sent
    t_first: float | None  # arrival of the first read that carried content
    t_end: float  # arrival of the read that carried [DONE] (or the error)
    wall_send: float  # time.time() at t_send (to correlate with server logs)
    chunk_times: list[float] = field(default_factory=list)  # per content chunk: its read's time
    chunk_tokens: list[int] = field(default_factory=list)  # tokens per content chunk (see module doc)
    chunk_tokens_exact: bool = False
    output_tokens: int | None = None  # usage.completion_tokens of the final usage chunk
    prompt_tokens: int | None = None
    text: str = ""
    reasoning: str = ""  # reasoning_content deltas (chat), kept apart from the text
    t_first_answer: float | None = None  # arrival of the first answer text (after any reasoning)
    reasoning_tokens: int | None = None  # usage's reasoning tokens where the server counts them
    finish_reason: str | None = None
    spec: dict | None = None  # the request's spec stats when the server sent them in the stream
    spec_field: str = ""  # where: "sglext" (SGLang >= 0.5.19) or "metrics" (vLLM >= 0.29); "" without stats
    # where the request stood in the replay (set by harness.bench.replay / harness.bench.conversation)
    attempts: int = 1  # 1 + retries; this result is the last attempt's
    turn: int = 1  # live multi-turn: 1 for the first user turn
    conversation_id: str = ""  # suite/prompt id shared by every turn of one conversation
    replay_pass: int = 1  # which pass over the suite within its phase (harness.bench.sizing)


MAX_TOKENS = 10**9  # a usage count above this is no count of a real request's tokens
ERROR_FINISH = ("abort", "error")  # SGLang and vLLM end a request they dropped with finish_reason "abort"


def _show(value: object) -> str:
    """A server's value in an error text: its JSON-ish repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_usage(usage: dict, finish: object, *, content: bool) -> str | None:
    """Why the final usage or finish_reason cannot be believed, or None. Counts must be JSON integers
    (not "8", [8], 8.0 or 1e308) in 0..MAX_TOKENS, and a stream that carried content has generated a token."""
    for name in ("completion_tokens", "prompt_tokens"):
        value = usage.get(name)
        if value is None:
            continue
        if type(value) is not int:
            return f"bad usage: {name} {_show(value)} is not an integer"
        if not 0 <= value <= MAX_TOKENS:
            return f"bad usage: {name} {value} out of range 0..{MAX_TOKENS}"
    if content and usage.get("completion_tokens") == 0:
        return "bad usage: completion_tokens 0 for a stream with content"
    if finish is not None and not isinstance(finish, str):
        return f"bad finish_reason {_show(finish)}"
    if finish in ERROR_FINISH:
        return f"server ended the request with finish_reason {finish!r}"
    return None


def _number(v: object) -> bool:
    return type(v) in (int, float)


# the per-request stats the engines compute with (harness.engines.*.spec): SGLang's spec_*, vLLM's num_*,
# mean_acceptance_length, acceptance_histogram, and the completion count in meta_info
_COUNTED = ("spec_", "num_", "mean_", "acceptance_", "completion_tokens")


def _numeric_spec(spec: dict) -> tuple[dict, str | None]:
    """Per-request spec stats whose counted fields are numbers only: one that is no number (or list of
    numbers) is dropped (the engines' formulas divide by them); a negative or absurd one makes the request
    an error. Other fields (a meta_info's id, finish_reason) pass unchanged."""
    out: dict = {}
    for k, v in spec.items():
        if not str(k).startswith(_COUNTED):
            out[k] = v
            continue
        values = v if isinstance(v, list) else [v]
        if not values or not all(_number(x) for x in values):
            continue
        if not all(math.isfinite(x) and 0 <= x <= MAX_TOKENS for x in values):
            return {}, f"bad spec stats: {k} {_show(v)}"
        out[k] = v
    return out, None


def spread_tokens(total: int, n: int) -> list[int]:
    """`total` tokens over `n` chunks as evenly as integers allow; sums to `total` exactly."""
    if n <= 0:
        return []
    return [(i + 1) * total // n - i * total // n for i in range(n)]


class _Collector:
    """Per-request state fed with (event payload, read timestamp); knows the chat and completions shapes."""

    __slots__ = ("chat", "times", "tokens", "texts", "reasoning", "last_cum", "cum_everywhere", "usage",
                 "spec", "spec_field", "finish", "done", "error", "t_end", "t_answer")

    def __init__(self, chat: bool):
        self.chat = chat
        self.times: list[float] = []
        self.tokens: list[int] = []  # -1 where the chunk carried no cumulative usage
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.last_cum = 0
        self.cum_everywhere = True
        self.usage: dict | None = None
        self.spec: object = None  # as the server sent it: checked once the stream ends
        self.spec_field = ""
        self.finish: str | None = None
        self.done = False
        self.error: str | None = None
        self.t_end: float | None = None
        self.t_answer: float | None = None

    def add_all(self, payloads: list[bytes], t: float) -> None:
        """The events of one network read, all stamped `t`. Hot path: locals instead of attributes."""
        loads = orjson.loads
        chat = self.chat
        times, tokens, texts = self.times, self.tokens, self.texts
        last_cum = self.last_cum
        try:
            for payload in payloads:
                if self.done:
                    return
                if payload == b"[DONE]":
                    self.done = True
                    self.t_end = t
                    return
                obj = loads(payload)
                choices = obj.get("choices")
                if not choices:
                    self._other(obj, t)
                    if self.error is not None:
                        return
                    continue
                c = choices[0]
                if chat:
                    delta = c.get("delta") or {}
                    text = delta.get("content")
                    other = delta.get("reasoning_content")
                else:
                    text = c.get("text")
                    other = None
                if c.get("finish_reason"):
                    self.finish = c["finish_reason"]
                new = -1
                usage = obj.get("usage")
                if usage:
                    cum = usage.get("completion_tokens")
                    if cum is not None:
                        if type(cum) is not int or not 0 <= cum <= MAX_TOKENS:
                            self.fail(f"bad usage: completion_tokens {_show(cum)} in a content chunk", t)
                            return
                        new = cum - last_cum
                        last_cum = cum
                # A content chunk carries text, or (reasoning models, stop tokens) new tokens by usage.
                if text or other or new > 0:
                    times.append(t)
                    tokens.append(new)
                    if new < 0:
                        self.cum_everywhere = False
                    if text:
                        texts.append(text)
                        if self.t_answer is None:
                            self.t_answer = t
                    if other:
                        self.reasoning.append(other)
        finally:
            self.last_cum = last_cum

    def _other(self, obj: dict, t: float) -> None:
        """A chunk without choices: the final usage, SGLang's sglext, vLLM's metrics, or an error event."""
        usage = obj.get("usage")
        if usage is not None:
            self.usage = usage
        sglext = obj.get("sglext")
        if sglext and sglext.get("spec_tokens_details") is not None:
            self.spec, self.spec_field = sglext["spec_tokens_details"], "sglext"
        metrics = obj.get("metrics")  # vLLM >= 0.29: per-request stats ride the final usage chunk
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.spec, self.spec_field = metrics["speculative_decoding"], "metrics"
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.fail(f"server error: {msg}", t)

    def fail(self, error: str, t: float) -> None:
        if self.error is None:
            self.error = error
            self.t_end = t

    def result(self, *, t_send: float, wall_send: float, status: int | None) -> StreamResult:
        t_end = self.t_end if self.t_end is not None else time.perf_counter()
        error = self.error
        usage = self.usage if isinstance(self.usage, dict) else {}
        output_tokens = usage.get("completion_tokens") if self.usage is not None else None
        prompt_tokens = usage.get("prompt_tokens")
        if error is None and not self.done:
            error = "stream ended without [DONE]"
        if error is None and output_tokens is None:
            error = "no usage chunk"
        bad = _bad_usage(usage, self.finish, content=bool(self.texts) or bool(self.reasoning))
        if bad is not None:
            # a count that is not a count never reaches a record: the request is an error with the reason
            error = error or bad
            output_tokens = prompt_tokens = None
        n = len(self.times)
        exact = n > 0 and self.cum_everywhere
        if exact:
            tokens = self.tokens
        elif output_tokens is not None:
            tokens = spread_tokens(int(output_tokens), n)
        else:
            tokens = [0] * n
        spec = self.spec
        if isinstance(spec, list):  # one per choice when n > 1; we only ever ask for one
            spec = spec[0] if spec and isinstance(spec[0], dict) else None
        if isinstance(spec, dict):
            spec, bad_spec = _numeric_spec(spec)
            error = error or bad_spec
        return StreamResult(
            ok=error is None, error=error, http_status=status, t_send=t_send,
            t_first=self.times[0] if n else None, t_end=t_end, wall_send=wall_send,
            chunk_times=self.times, chunk_tokens=tokens, chunk_tokens_exact=exact,
            output_tokens=output_tokens, prompt_tokens=prompt_tokens,
            text="".join(self.texts), reasoning="".join(self.reasoning),
            finish_reason=self.finish if isinstance(self.finish, str) else None,
            spec=spec if isinstance(spec, dict) else None, spec_field=self.spec_field if spec else "",
            t_first_answer=self.t_answer,
            reasoning_tokens=_reasoning_tokens(usage),
        )


def _reasoning_tokens(usage: dict) -> int | None:
    """SGLang's usage.reasoning_tokens, or OpenAI's completion_tokens_details.reasoning_tokens."""
    value = usage.get("reasoning_tokens")
    if value is None:
        details = usage.get("completion_tokens_details")
        value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
