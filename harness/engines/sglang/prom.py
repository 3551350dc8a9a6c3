"""The server's own latency over one phase, from SGLang's Prometheus histograms (`--enable-metrics`).

SGLang's tokenizer manager observes, per request, `sglang:time_to_first_token_seconds` (from the
request's arrival to its first output), `sglang:e2e_request_latency_seconds` and, in the scheduler,
`sglang:queue_time_seconds`. A histogram's `_sum` and `_count` only grow, so a scrape before a phase and
one after it give the phase's exact mean: (sum after - sum before) / (count after - count before). Not
a gauge, not a lifetime average (PEERS.md: tools that read lifetime counters or average gauges report
what the server did before the run). Compared with the client's own TTFT of the same requests, the
server's says how much of a TTFT is the network, the HTTP server and the client, and how much is
queueing and prefill: when the two move apart, the client or the link is distorting the measure.
"""

from __future__ import annotations

import math

# phase column -> histogram base name (every label set summed: one model, possibly several ranks)
HISTOGRAMS = {
    "server_ttft_ms_mean": "sglang:time_to_first_token_seconds",
    "server_queue_ms_mean": "sglang:queue_time_seconds",
    "server_e2e_ms_mean": "sglang:e2e_request_latency_seconds",
}
COLUMNS = ["server_requests", *HISTOGRAMS]
_COUNTED = "sglang:e2e_request_latency_seconds"  # its count is the phase's finished requests
Totals = dict[str, tuple[float, float]]  # base name -> (sum, count)


def histogram_totals(text: str) -> Totals:
    """(sum, count) of each histogram of HISTOGRAMS in a /metrics body, over all label sets."""
    wanted = set(HISTOGRAMS.values())
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("sglang:"):
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i > 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            if name.endswith(suffix) and name[: -len(suffix)] in wanted:
                try:
                    value = float(line.rsplit(None, 1)[-1])
                except ValueError:
                    break
                if math.isfinite(value):
                    out.setdefault(name[: -len(suffix)], [0.0, 0.0])[slot] += value
                break
    return {k: (v[0], v[1]) for k, v in out.items()}


def phase_means(before: Totals | None, after: Totals | None) -> dict[str, float | None]:
    """The phase's columns: requests the server finished in it and the mean of each histogram in ms;
    None where a scrape failed, the server has no such histogram, or nothing was observed."""
    row: dict[str, float | None] = dict.fromkeys(COLUMNS)
    if before is None or after is None:
        return row
    for column, name in HISTOGRAMS.items():
        if name not in after:
            continue
        s0, n0 = before.get(name, (0.0, 0.0))
        s1, n1 = after[name]
        if n1 - n0 > 0 and s1 >= s0:
            row[column] = round((s1 - s0) / (n1 - n0) * 1000.0, 3)
        if name == _COUNTED and n1 >= n0:
            row["server_requests"] = n1 - n0
    return row
