"""Real vLLM 0.26.0 on the H200 machine (benchmarks/h200/vllm.sh carry 1-3, install, smoke; issue 29): a
tiny random-weight Llama with a random EAGLE-3 head (3 speculative tokens) served by `vllm serve`, one
chat request. The parser of draftbench's vLLM engine reads the real server's log lines and /metrics, and
the two sources agree with each other (a random head accepts nothing: accept length exactly 1.00)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from harness.engines.vllm.logline import parse_line
from harness.engines.vllm.metrics import parse_metrics, phase_means

D = Path(__file__).parent / "fixtures" / "vllm-0.26.0" / "smoke"


def _windows():
    lines = gzip.open(D / "server-eagle3.log.gz", "rt", encoding="utf-8").read().splitlines()
    return [w for i, line in enumerate(lines, 1) if (w := parse_line(line, i)) is not None]


def test_the_real_servers_log_lines_are_read():
    wins = _windows()
    spec = [w for w in wins if w.kind == "decode"]
    stats = [w for w in wins if w.kind == "stats"]
    assert len(spec) == 1 and len(stats) == 1
    extra = dict(spec[0].extra)
    assert (spec[0].accept_len, spec[0].accept_rate) == (1.0, 0.0)
    assert (extra["accepted_tokens"], extra["drafted_tokens"]) == ("0", "189")
    assert extra["per_position"] == "0.000 0.000 0.000"  # one rate per speculative token
    assert stats[0].gen_throughput == 6.0 and stats[0].ranks == "Engine 000"


def test_metrics_deltas_agree_with_the_log():
    before = parse_metrics((D / "metrics-before.txt").read_text())
    after = parse_metrics((D / "metrics-after.txt").read_text())
    got = phase_means(before, after)
    # 63 drafts of 3 tokens: the log's 189 drafted tokens
    assert (got["server_spec_drafts"], got["server_spec_draft_tokens"]) == (63.0, 189.0)
    assert got["server_spec_accepted_tokens"] == 0.0 and got["server_accept_len"] == 1.0
    assert got["server_accept_per_pos"] == "0.0000 0.0000 0.0000"


def test_the_release_and_its_stream():
    imp = json.loads((D / "import.json").read_text())
    assert imp["distributions"]["vllm"] == "0.26.0" and not imp["failed"]
    data = [line.split("\t", 2)[2] for line in (D / "sse.txt").read_text().splitlines()
            if line.count("\t") >= 2 and line.split("\t", 2)[2].startswith("data: {")]
    first = json.loads(data[0][len("data: "):])
    # the role chunk already carries usage (continuous usage stats), as the stand-in's does
    assert first["choices"][0]["delta"]["role"] == "assistant" and first["usage"]["completion_tokens"] == 0
