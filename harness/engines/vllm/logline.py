"""vLLM's periodic stats log lines -> ``LogWindow`` (the type SGLang's windows use).

Formats, from vLLM's own source (docs/vllm.md lists the releases read):
  spec (v1, 0.11.0 .. 0.33.0)  ``SpecDecoding metrics: Mean acceptance length: 2.77, Accepted throughput:
      0.12 tokens/s, Drafted throughput: 0.34 tokens/s, Accepted: 92 tokens, Drafted: 259 tokens,
      Per-position acceptance rate: 0.757, 0.622, Avg Draft acceptance rate: 35.5%``
  spec (v1, 0.8.5 .. 0.10.x)  ``SpecDecoding metrics: Draft acceptance rate: 51.4%, Mean acceptance length:
      2.03, Accepted: N tokens, Drafted: N tokens, Per-position acceptance rate: 0.833, 0.500``
      (0.8.5 printed accepted/drafts without the bonus token; 0.9.0 on print 1 + accepted/drafts. The
      line cannot say which: the per-position rates sum to accepted/drafts, so the printed mean is read
      against that sum and the bonus added when it is missing)
  spec (v1, 0.8.0 .. 0.8.4)   ``SpecDecoding metrics: Draft acceptance rate: 51.4%, Accepted: N tokens,
      Drafted: N tokens`` (no accept length: the draft count is not printed)
  spec (v0 engine)  ``Speculative metrics: Draft acceptance rate: 0.520, System efficiency: ..., Number of
      speculative tokens: 4, Number of accepted tokens: N, Number of draft tokens: N, Number of emitted
      tokens: N.`` (totals since the server started: kept in ``extra``, no window accept length)
  engine stats (v1)  ``Engine 000: Avg prompt throughput: 93.9 tokens/s, Avg generation throughput: 13.0
      tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%``
A spec window has kind "decode" (the verify steps of the interval), an engine-stats window kind "stats".
Each window covers the interval since the previous line (VLLM_LOG_STATS_INTERVAL, 10 s by default).
"""

from __future__ import annotations

import re

from harness.common.logwindow import LogWindow

_TIME = re.compile(r"(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)")
_NUM = r"(-?\d+(?:\.\d+)?|nan|inf)"
_V1_MARK = "SpecDecoding metrics: "
_V0_MARK = "Speculative metrics: "
_STATS_MARK = "Avg prompt throughput: "


def _f(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _field(body: str, label: str, unit: str = "") -> str | None:
    m = re.search(re.escape(label) + r": " + _NUM + re.escape(unit), body)
    return m.group(1) if m else None


def _head(text: str, mark: str) -> tuple[str, str, str] | None:
    at = text.find(mark)
    if at < 0:
        return None
    t = _TIME.search(text, 0, at)
    return (t.group(1) if t else ""), text[: at], text[at + len(mark):]


def parse_line(text: str, line_no: int) -> LogWindow | None:
    """One window per vLLM stats line; None for any other line (and for a line cut before its end)."""
    text = text.rstrip("\r\n")
    if _V1_MARK in text:
        return _spec_v1(text, line_no)
    if _STATS_MARK in text:
        return _engine_stats(text, line_no)
    if _V0_MARK in text:
        return _spec_v0(text, line_no)
    return None


def _spec_v1(text: str, line_no: int) -> LogWindow | None:
    time, prefix, body = _head(text, _V1_MARK)  # type: ignore[misc]
    accepted, drafted = _field(body, "Accepted", " tokens,"), _field(body, "Drafted", " tokens")
    if accepted is None or drafted is None:
        return None
    rate = _field(body, "Avg Draft acceptance rate", "%") or _field(body, "Draft acceptance rate", "%")
    if rate is None:
        return None
    per_pos: list[float] = []
    m = re.search(r"Per-position acceptance rate: ([0-9., ]*?)(?:, Avg |$)", body)
    if m:
        per_pos = [v for v in (_f(p) for p in m.group(1).split(",") if p.strip()) if v is not None]
    mean = _f(_field(body, "Mean acceptance length"))
    if "Mean acceptance length" in body and mean is None:
        return None
    if mean is not None and per_pos and abs(mean - sum(per_pos)) < abs(mean - 1.0 - sum(per_pos)):
        mean = round(mean + 1.0, 2)  # 0.8.5 printed accepted/drafts: the bonus token was left out
    extra = [("accepted_tokens", accepted), ("drafted_tokens", drafted)]
    for label, key in (("Accepted throughput", "accepted_tok_s"), ("Drafted throughput", "drafted_tok_s")):
        v = _field(body, label, " tokens/s")
        if v is not None:
            extra.append((key, v))
    if per_pos:
        extra.append(("per_position", " ".join(f"{p:.3f}" for p in per_pos)))
    return LogWindow(line=line_no, time=time, kind="decode", accept_len=mean,
                     accept_rate=round(float(rate) / 100.0, 6), ranks=_ranks(prefix), extra=tuple(extra))


def _spec_v0(text: str, line_no: int) -> LogWindow | None:
    time, prefix, body = _head(text, _V0_MARK)  # type: ignore[misc]
    keys = (("Draft acceptance rate", "draft_acceptance_rate"), ("System efficiency", "system_efficiency"),
            ("Number of speculative tokens", "num_spec_tokens"),
            ("Number of accepted tokens", "accepted_tokens"),
            ("Number of draft tokens", "drafted_tokens"), ("Number of emitted tokens", "emitted_tokens"))
    vals = [(key, _field(body, label)) for label, key in keys]
    if any(v is None for _, v in vals) or not body.rstrip().endswith("."):
        return None
    extra = tuple((k, str(v)) for k, v in vals) + (("cumulative", "true"),)
    return LogWindow(line=line_no, time=time, kind="decode", accept_rate=_f(vals[0][1]), ranks=_ranks(prefix),
                     extra=extra)


def _engine_stats(text: str, line_no: int) -> LogWindow | None:
    time, prefix, body = _head(text, _STATS_MARK)  # type: ignore[misc]
    body = _STATS_MARK + body
    running, waiting = _field(body, "Running", " reqs"), _field(body, "Waiting", " reqs")
    if running is None or waiting is None:
        return None
    usage = re.search(r"KV cache usage: " + _NUM + "%", body)
    engine = re.search(r"Engine (\d+): $", prefix)
    return LogWindow(line=line_no, time=time, kind="stats", running_req=int(float(running)),
                     queue_req=int(float(waiting)),
                     token_usage=round(float(usage.group(1)) / 100.0, 6) if usage else None,
                     gen_throughput=_f(_field(body, "Avg generation throughput", " tokens/s")),
                     input_throughput=_f(_field(body, "Avg prompt throughput", " tokens/s")),
                     ranks=f"Engine {engine.group(1)}" if engine else _ranks(prefix))


def _ranks(prefix: str) -> str:
    m = re.search(r"\((\w+) pid=\d+\)", prefix)
    return m.group(1) if m else ""
