"""draftbench and sglang.bench_serving on the same real SGLang 0.5.15.post1 servers (H200, Llama-8B shape,
random weights, 38 prompts at concurrency 8, two rounds of each tool): what the run kept, re-read here
(docs/real-gpu.md). `keep-alive`: draftbench's default connections; `per-request`: a new connection for
every request, as bench_serving opens one (baseline only). Each bench_serving round was bracketed by two
/metrics scrapes; draftbench records the same histograms per phase itself (harness.engines.sglang.prom)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path

import pytest

from harness.engines.sglang.prom import histogram_totals, phase_means

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "vs-bench_serving"
RUNS = {"keep-alive": ("baseline", "eagle3"), "per-request": ("baseline",)}
CASES = [(run, v) for run, variants in RUNS.items() for v in variants]
PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def _csv(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return list(csv.DictReader(io.StringIO(f.read())))


def _bench_rounds(run: str, variant: str) -> list[tuple[dict, dict]]:
    """bench_serving's rounds: (its figures, the server's histogram means over the round)."""
    out = []
    for tag in ("", "-rep2"):
        figures = json.loads((FIX / run / f"bench_serving-{variant}{tag}.jsonl").read_text())
        scrapes = [gzip.open(FIX / run / f"metrics-bench_serving-{variant}{tag}-{w}.txt.gz", "rt").read()
                   for w in ("before", "after")]
        out.append((figures, phase_means(*(histogram_totals(s) for s in scrapes))))
    return out


def _draftbench_rounds(run: str, variant: str) -> list[tuple[float, dict[str, str]]]:
    """draftbench's phases: (the client's mean TTFT over the phase's requests, the phase's row)."""
    requests = _csv(FIX / run / "requests.csv.gz")
    out = []
    for phase in _csv(FIX / run / "phases.csv"):
        if phase["variant"] == variant:
            mine = [float(r["ttft_ms"]) for r in requests
                    if (r["variant"], r["phase"], r["ok"]) == (variant, phase["phase"], "True")]
            assert len(mine) == int(phase["requests"]) == 38
            out.append((sum(mine) / len(mine), phase))
    assert len(out) == 2
    return out


@pytest.mark.parametrize(("run", "variant"), CASES)
def test_each_window_of_the_histograms_holds_exactly_its_requests(run: str, variant: str) -> None:
    for figures, server in _bench_rounds(run, variant):
        assert server["server_requests"] == figures["completed"] == 38
    for _, phase in _draftbench_rounds(run, variant):
        assert float(phase["server_requests"]) == 38


@pytest.mark.parametrize(("run", "variant"), CASES)
def test_time_outside_the_server_is_the_same_for_both_tools(run: str, variant: str) -> None:
    """Client TTFT minus the server's own TTFT for the same requests: network, HTTP, the SSE chunk that
    carries the first two tokens, and the client. Within 2 ms (2 % of these TTFTs) between the tools."""
    mine = [client - float(p["server_ttft_ms_mean"]) for client, p in _draftbench_rounds(run, variant)]
    theirs = [f["mean_ttft_ms"] - s["server_ttft_ms_mean"] for f, s in _bench_rounds(run, variant)]
    assert all(5 < x < 30 for x in mine + theirs)
    assert abs(sum(mine) / 2 - sum(theirs) / 2) < 2.0, (mine, theirs)


@pytest.mark.parametrize(("run", "variant"), CASES)
def test_both_tools_sent_the_same_prompts_in_the_same_order(run: str, variant: str) -> None:
    requests = _csv(FIX / run / "requests.csv.gz")
    first = min(r["phase"] for r in requests)
    mine = sorted((float(r["t_send"]), int(r["prompt_tokens"])) for r in requests
                  if (r["variant"], r["phase"]) == (variant, first))
    for figures, _ in _bench_rounds(run, variant):
        # bench_serving counts the prompt without the chat template's tokens: one constant offset
        offsets = {m[1] - theirs for m, theirs in zip(mine, figures["input_lens"], strict=True)}
        assert len(offsets) == 1 and offsets.pop() > 0


def _waves(part: str, width: int = 8, total: int = 38) -> tuple[list[tuple[int, int]], list[int]]:
    """The prefill batches of one round up to its `total` sequences ((seqs, tokens incl. cached) each), and
    the prompt tokens of each wave of `width` sequences they add up to."""
    batches, waves, seqs, tokens = [], [], 0, 0
    for m in PREFILL.finditer(part):
        n, new, cached = (int(g) for g in m.groups())
        batches.append((n, new + cached))
        seqs, tokens = seqs + n, tokens + new + cached
        if seqs % width == 0 or seqs == total:
            waves.append(tokens)
            tokens = 0
        if seqs >= total:
            break
    assert seqs == total
    return batches, waves


@pytest.mark.parametrize(("run", "variant"), CASES)
def test_every_round_prefilled_the_same_waves(run: str, variant: str) -> None:
    """After each /flush_cache (one per round of either tool), the scheduler's prefill batches: the same
    waves of 8 prompts in every round; on the baseline servers the same batches too (the first request of
    each wave alone, then the other 7), on the EAGLE3 server the split within a wave varied (1+7, 2+6, 3+5).
    TTFT differences between the rounds are timing, not different work."""
    text = gzip.open(FIX / run / "logs" / f"{variant}.log.gz", "rt").read()
    rounds = [_waves(part) for part in text.split("Cache flushed successfully!")[1:]]
    assert len(rounds) == 4
    assert all(waves == rounds[0][1] for _, waves in rounds)
    if variant == "baseline":
        assert all(batches == rounds[0][0] for batches, _ in rounds)
        assert [n for n, _ in rounds[0][0]] == [1, 7] * 4 + [1, 5]


def test_per_request_connections_brought_the_servers_ttft_down() -> None:
    """The same baseline server workload: with keep-alive, draftbench's next request reaches the server
    ~0.3 ms after the last response ends; the server's own TTFT for them was higher than for
    bench_serving's (a new connection per request). With a connection per request, it was not."""
    keep = [float(p["server_ttft_ms_mean"]) for _, p in _draftbench_rounds("keep-alive", "baseline")]
    fresh = [float(p["server_ttft_ms_mean"]) for _, p in _draftbench_rounds("per-request", "baseline")]
    bench_keep = [s["server_ttft_ms_mean"] for _, s in _bench_rounds("keep-alive", "baseline")]
    bench_fresh = [s["server_ttft_ms_mean"] for _, s in _bench_rounds("per-request", "baseline")]
    assert min(keep) > max(bench_keep)
    assert max(fresh) < max(bench_fresh) and min(fresh) < min(keep)
