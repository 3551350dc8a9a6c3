"""Run-scoped acceptance and latency from vLLM's Prometheus counters: one scrape of /metrics before a phase,
one after, and only their difference is used (never a lifetime value, never a gauge).

Counters (vllm/v1/spec_decode/metrics.py `SpecDecodingProm`, 0.8.5 .. 0.33.0; exported with `_total`):
  vllm:spec_decode_num_drafts            verify steps that carried a draft
  vllm:spec_decode_num_draft_tokens      draft tokens proposed
  vllm:spec_decode_num_accepted_tokens   draft tokens accepted (the bonus token is not counted)
  vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}   drafts whose token i was accepted
Accept length over the phase = 1 + Δaccepted / Δdrafts: tokens committed per verify step, bonus included,
prefill excluded (the prefill's token is not a draft step) -- the same quantity as SGLang's accept len.
Per-position acceptance i = Δper_pos[i] / Δdrafts (P(token i accepted), unconditional, as vLLM logs it).
Latency histograms (`_sum`/`_count`): vllm:time_to_first_token_seconds, vllm:request_queue_time_seconds,
vllm:e2e_request_latency_seconds, summed over label sets (engines, models).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
HISTOGRAMS = {
    "server_ttft_ms_mean": "vllm:time_to_first_token_seconds",
    "server_queue_ms_mean": "vllm:request_queue_time_seconds",
    "server_e2e_ms_mean": "vllm:e2e_request_latency_seconds",
}
_COUNTED = "vllm:e2e_request_latency_seconds"
SPEC_COLUMNS = ["server_spec_drafts", "server_spec_draft_tokens", "server_spec_accepted_tokens",
                "server_accept_per_pos"]
COLUMNS = ["server_requests", *HISTOGRAMS, *SPEC_COLUMNS]


@dataclass
class Scrape:
    """The parts of one /metrics body draftbench uses, every label set summed."""

    counters: dict[str, float] = field(default_factory=dict)  # "drafts" / "draft_tokens" / "accepted"
    per_pos: dict[int, float] = field(default_factory=dict)
    hist: dict[str, tuple[float, float]] = field(default_factory=dict)  # base name -> (sum, count)


def _name_labels_value(line: str) -> tuple[str, str, float] | None:
    brace = line.find("{")
    space = line.find(" ")
    if brace > 0 and (space < 0 or brace < space):
        close = line.find("}", brace)
        if close < 0:
            return None
        name, labels, rest = line[:brace], line[brace + 1:close], line[close + 1:]
    elif space > 0:
        name, labels, rest = line[:space], "", line[space:]
    else:
        return None
    parts = rest.split()
    if not parts:
        return None
    try:
        value = float(parts[0])
    except ValueError:
        return None
    return (name, labels, value) if math.isfinite(value) else None


def _label(labels: str, key: str) -> str | None:
    for part in labels.split(","):
        k, _, v = part.partition("=")
        if k.strip() == key:
            return v.strip().strip('"')
    return None


def parse_metrics(text: str) -> Scrape:
    out = Scrape()
    hists = set(HISTOGRAMS.values())
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        parsed = _name_labels_value(line)
        if parsed is None:
            continue
        name, labels, value = parsed
        base = name[:-6] if name.endswith("_total") else name
        if base == PER_POS:
            pos = _label(labels, "position")
            if pos is not None and pos.isdigit():
                out.per_pos[int(pos)] = out.per_pos.get(int(pos), 0.0) + value
        elif base in COUNTERS:
            key = COUNTERS[base]
            out.counters[key] = out.counters.get(key, 0.0) + value
        else:
            for suffix, slot in (("_sum", 0), ("_count", 1)):
                if name.endswith(suffix) and name[: -len(suffix)] in hists:
                    s, n = out.hist.get(name[: -len(suffix)], (0.0, 0.0))
                    out.hist[name[: -len(suffix)]] = (s + value, n) if slot == 0 else (s, n + value)
    return out


def accept_len(drafts: float, accepted: float) -> float | None:
    """Tokens committed per verify step, bonus included: vLLM's own `1 + accepted / drafts`."""
    return 1.0 + accepted / drafts if drafts > 0 else None


def phase_means(before: Scrape | None, after: Scrape | None) -> dict[str, float | str | None]:
    """The phase's server-side columns, plus `server_accept_len` from the counter deltas (None where a
    scrape failed or the server drafted nothing in the phase)."""
    row: dict[str, float | str | None] = dict.fromkeys([*COLUMNS, "server_accept_len"])
    if before is None or after is None:
        return row
    for column, name in HISTOGRAMS.items():
        if name not in after.hist:
            continue
        s0, n0 = before.hist.get(name, (0.0, 0.0))
        s1, n1 = after.hist[name]
        if n1 - n0 > 0 and s1 >= s0:
            row[column] = round((s1 - s0) / (n1 - n0) * 1000.0, 3)
        if name == _COUNTED and n1 >= n0:
            row["server_requests"] = n1 - n0
    d = {k: after.counters.get(k, 0.0) - before.counters.get(k, 0.0) for k in COUNTERS.values()}
    if "drafts" in after.counters and min(d.values()) >= 0:  # a counter going down: the server restarted
        row["server_spec_drafts"] = d["drafts"]
        row["server_spec_draft_tokens"] = d["draft_tokens"]
        row["server_spec_accepted_tokens"] = d["accepted"]
        row["server_accept_len"] = accept_len(d["drafts"], d["accepted"])
        if after.per_pos and d["drafts"] > 0:
            rates = [(after.per_pos[p] - before.per_pos.get(p, 0.0)) / d["drafts"]
                     for p in sorted(after.per_pos)]
            row["server_accept_per_pos"] = " ".join(f"{r:.4f}" for r in rates)
    return row
