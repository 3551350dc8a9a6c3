"""What real SGLang 0.5.15.post1 printed on the H200 (docs/real-gpu.md), read back by today's code.

* draftbench-run-shuffled/: baseline, EAGLE3 and the wrong flag on the 8B-shaped random-weight target,
  run.order shuffled; the live (incremental) parse of the server logs during the run must equal a parse of
  the same logs now, and the summary's log accept length must follow from those windows.
* trained-tiny/: the retrain loop for real: `draftbench regen` through the served tiny target (its server
  log), `draftbench train` following the trainer, and the run of the trained head.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.summary import read_variants, summarise
from harness.engines.sglang.logparse import parse_file
from harness.retrain.progress import parse_line

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
SHUF = FIX / "draftbench-run-shuffled"
TINY = FIX / "trained-tiny"
VARIANTS = ("baseline", "eagle3", "wrong-flag-eagle")


def _decode_lines(path: Path) -> int:
    with gzip.open(path, "rt", errors="replace") as fh:
        return sum("Decode batch" in line for line in fh)


@pytest.mark.parametrize("variant", VARIANTS)
def test_live_parse_equals_a_parse_of_the_log_afterwards(variant, tmp_path):
    live = pd.read_csv(SHUF / "server_windows.csv.gz")
    live = live[live.variant == variant]
    log = tmp_path / f"{variant}.log"
    log.write_bytes(gzip.decompress((SHUF / f"server-{variant}.log.gz").read_bytes()))
    now = list(parse_file(log))
    assert len(now) == len(live) > 0
    assert sum(w.kind == "decode" for w in now) == _decode_lines(SHUF / f"server-{variant}.log.gz")
    lines = live.line.tolist()
    if variant != "baseline":
        # recorded by the runner of that day: the last stats line arrived after the server was stopped and
        # was numbered from 1 (fixed since; tests/test_runner_log_lines.py)
        assert lines[-1] < 10 and now[-1].line > 900
        lines[-1] = now[-1].line
    for w, (_, row), line in zip(now, live.iterrows(), lines, strict=True):
        assert (w.line, w.kind, w.running_req, w.time) == (line, row.kind, row.running_req, row.time)
        for field in ("accept_len", "gen_throughput", "token_usage"):
            got, want = getattr(w, field), row[field]
            assert (got is None and pd.isna(want)) or math.isclose(got, want, rel_tol=1e-9), (field, w.line)


def _summary(run: Path) -> pd.DataFrame:
    """The run's summary as today's code computes it from its records (never the stored summary.csv)."""
    return summarise(pd.read_csv(run / "requests.csv.gz"), pd.read_csv(run / "phases.csv"),
                     pd.read_csv(run / "server_windows.csv.gz"), read_variants(run),
                     pd.read_csv(run / "spec_probe.csv"))


def test_summary_accept_length_follows_from_the_phase_windows():
    summary = _summary(SHUF)
    windows = pd.read_csv(SHUF / "server_windows.csv.gz")
    spec = summary[summary.variant != "baseline"]
    assert len(spec) == 4
    for _, row in spec.iterrows():
        phase = windows[(windows.variant == row.variant) & (windows.kind == "decode")
                        & windows.phase.astype(str).str.contains(f"@c{row.concurrency}#")]
        assert len(phase) > 0
        assert math.isclose(phase.accept_len.mean(), row.accept_len_log, abs_tol=0.01)
        assert math.isclose(row.accept_len_server, row.accept_len_log, abs_tol=0.02)
    # random draft weights: EAGLE3 accepts nothing; the wrong flag swaps in the target's own lm_head, and the
    # random target's greedy output is a 2-cycle that such a draft predicts (docs/real-gpu.md)
    by = spec.set_index(["variant", "concurrency"])
    assert by.loc[("eagle3", 8), "accept_len_log"] == 1.0
    assert math.isclose(by.loc[("wrong-flag-eagle", 8), "accept_len_log"], 2.0, abs_tol=0.01)
    # 0.5.15 sends no per-request stats while streaming: the untimed probe, checked against the timed pass
    assert set(spec.accept_len_source) == {"probe"}


def test_break_even_from_the_real_servers_step_costs():
    """The H200's decode windows: baseline 4.6 ms per decode step at batch 1 and 4.9 ms at batch 8, EAGLE3
    (3,1,4) 6.4 / 8.9 ms per verify step; break-even accept length 1.41 at batch 1 and 1.83 at batch 8,
    the same for the wrong flag (same shape, same step cost)."""
    by = _summary(SHUF).set_index(["variant", "concurrency"])
    for variant in ("eagle3", "wrong-flag-eagle"):
        one, eight = by.loc[(variant, 1)], by.loc[(variant, 8)]
        assert one.break_even_batch == 1 and eight.break_even_batch == 8
        assert math.isclose(one.decode_step_ms, 4.56, abs_tol=0.05)
        assert math.isclose(one.break_even_accept_len, 1.41, abs_tol=0.02)
        assert math.isclose(eight.break_even_accept_len, 1.83, abs_tol=0.02)
        assert one.break_even_accept_len == one.step_ms_ratio
        assert eight.ttft_cost_ms > 0  # the draft's extend pass rides on every prefill
    # speedup above 1 exactly where the accept length clears the break-even
    for key in (("eagle3", 1), ("eagle3", 8), ("wrong-flag-eagle", 1), ("wrong-flag-eagle", 8)):
        row = by.loc[key]
        assert (row.speedup > 1.0) == (row.accept_len > row.break_even_accept_len), key


def test_regen_server_log_cuda_graph_follows_the_batch_size(tmp_path):
    """The regeneration server ran with --cuda-graph-max-bs-decode 16 and 32 requests at a time: every
    Decode line at more than 16 running requests says `cuda graph: False`, the others True."""
    raw = gzip.decompress((TINY / "regen-server.log.gz").read_bytes())
    (tmp_path / "regen.log").write_bytes(raw)
    decode = [w for w in parse_file(tmp_path / "regen.log") if w.kind == "decode"]
    assert len(decode) == raw.count(b"Decode batch") == 845
    assert all(w.cuda_graph == (w.running_req <= 16) for w in decode)
    assert {w.running_req for w in decode} >= {2, 32}
    # the regen's own client-side rate (regen.log) against the log's decode windows at 32 running
    final = (TINY / "regen.log").read_text().splitlines()[-2]
    client = float(re.search(r"([\d.]+) output tok/s", final)[1])
    busy = [w.gen_throughput for w in decode if w.running_req == 32 and w.gen_throughput > 100]
    log_rate = sum(busy) / len(busy)
    assert 1.0 <= log_rate / client <= 1.25  # decode windows exclude the prefills between them


def test_the_trained_head_run():
    """The table draftbench printed for the trained head: EAGLE3 above 1.5 accepted tokens per step and
    faster than the baseline at concurrency 1, the wrong flag far below it with the drafter-inert alarm,
    and the three accept-length sources agreeing."""
    text = (TINY / "draftbench-run.log").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^[*!]?(baseline|eagle3|wrong-flag-eagle)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+"
                     r"(\S+)\s+(\S+)\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+([\d.]+)x", line)
        if m:
            rows[(m[1], int(m[2]))] = {"accept_len": m[6], "accept_rate": m[7], "tok_s": float(m[8]),
                                       "speedup": float(m[9])}
    assert len(rows) == 6
    assert float(rows[("eagle3", 1)]["accept_len"]) > 1.5
    assert rows[("eagle3", 1)]["speedup"] > 1.0
    assert float(rows[("wrong-flag-eagle", 1)]["accept_len"]) < 1.5
    assert "ERROR drafter-inert" in text and "break-even AL" in text
    compare = (TINY / "compare.md").read_text()
    sources = re.search(r"\| eagle3 \|.*?\| ([\d.]+) / ([\d.]+) / ([\d.]+) \|", compare)
    values = [float(x) for x in sources.groups()]
    assert max(values) - min(values) < 0.05 and min(values) > 3.0
    # the training job as `draftbench train --follow` saw it: the SpecForge-format lines parsed
    follow = (TINY / "train-follow.log").read_text()
    assert "finished epoch 24/1000 step 800/800" in follow
    assert parse_line("Training completed at step 800, saving final checkpoint...") is not None


def test_verdicts_on_the_h200_run():
    """One repeat of 38 prompts on the H200. Concurrency 1: the paired prompt bootstrap decides (EAGLE3 with
    random draft weights slower, the wrong flag's 2-cycle faster). Concurrency 8: each phase's steady state
    (8 in flight) lasts 2.7-5.0 s, under run.min_steady_s: too short to decide, even EAGLE3's 0.56x."""
    by = _summary(SHUF).set_index(["variant", "concurrency"])
    assert by.loc[("baseline", 1), "verdict"] == by.loc[("baseline", 8), "verdict"] == "baseline"
    one, eight = by.loc[("eagle3", 1)], by.loc[("eagle3", 8)]
    assert one.verdict == "slower" and one.ci_method == "bootstrap-prompts"
    assert one.speedup_ci_low < one.speedup < one.speedup_ci_high < 0.75
    assert by.loc[("wrong-flag-eagle", 1), "verdict"] == "faster"
    assert eight.speedup < 0.6 and eight.too_short and eight.verdict == "too-short"
    assert eight.verdict_reason.startswith("too short to decide: steady state of")
    assert not bool(eight.slower_than_baseline)
    assert math.isclose(one.mean_in_flight, 1.0, abs_tol=0.01) and 7.0 < eight.mean_in_flight < 8.0
    assert eight.steady_tok_s > eight.tok_s  # the ramp and the tail are left out
