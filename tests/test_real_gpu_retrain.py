"""The retrain loop on the H200 (2026-12-03, `benchmarks/h200/retrain.sh warm` then `retrain.sh` on the same
machine; fixtures in tests/fixtures/sglang-0.5.15.post1/retrain/): real SGLang 0.5.15.post1, the tiny target
trained for 35 s and its deployed head (one step on placeholder answers), `draftbench run --keep-servers`,
then `draftbench retrain --by prompt` on the kept servers: weak spots and traffic regenerated through the
target, the head fine-tuned for 300 steps, the paired evaluation on held-out prompts, the gate, the promotion,
and `draftbench watch` of the source run against the promoted profile.
Every figure docs/real-gpu.md quotes ("The retrain loop on the H200") is recomputed here from the records
through draftbench's own code (gate.judge, weak_spots, watch.compare, summarise_dir), and the gate is shown
to rest on what it claims: the same candidate judged against the baseline instead is refused."""

from __future__ import annotations

import gzip
import json
import re
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.sequential import look_level
from harness.analysis.summary import summarise_dir
from harness.retrain import gate, watch
from harness.retrain.profile import read_profile
from harness.retrain.weak_spots import overall, pick, spots, variant_requests
from tests.fixture_dirs import assert_same_columns, unpacked

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "retrain"
DOC = Path(__file__).parent.parent / "docs" / "real-gpu.md"
CAND, CUR, BASE = "eagle3-ccdf", "eagle3", "baseline"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("h200-retrain")
    return unpacked(FIX / "eval", root / "eval"), unpacked(FIX / "source", root / "source")


def _gate_look() -> dict:
    # the loop's single look (run.max_repeats 1): its Haybittle-Peto level, as harness.retrain.loop_looks
    return {1: {"look": 1, "looks": 1, "level": round(look_level(1, 1), 6), "repeats": 1}}


def _doc_section() -> str:
    text = DOC.read_text()
    start = text.index("## The retrain loop on the H200")
    end = text.find("\n## ", start + 10)
    return text[start:end if end > 0 else None]


def test_the_gate_recomputes_the_printed_verdict(dirs):
    ev, _ = dirs
    res = gate.judge(ev, CAND, CUR, [1], looks=_gate_look())
    printed = (FIX / "retrain.out").read_text()
    assert res.lines()[0] in printed and res.passed and res.lossless == "passed"
    (row,) = res.rows
    assert (row.verdict, f"{row.speedup:.2f}", f"{row.low:.2f}", f"{row.high:.2f}") \
        == ("faster", "2.33", "2.05", "2.64")
    assert (f"{row.accept_ratio:.2f}", f"{row.accept_low:.2f}", f"{row.accept_high:.2f}") \
        == ("2.58", "2.23", "2.98")
    assert row.vs_baseline == "undecided" and "15 paired prompts" in row.reason
    assert row.line() in printed
    # the promotion recorded that very line, and the lineage names each step's record
    head = yaml.safe_load((FIX / "tiny-head.yaml").read_text())
    (entry,) = head["lineage"]
    assert entry["verdicts"] == [row.line(), "lossless audit: passed"] and entry["rule"] == "faster"
    state = json.loads((FIX / "state.json").read_text())
    assert state["done"] == ["select", "regen", "train", "export", "evaluate", "gate", "promote"]
    assert (entry["job"], entry["checkpoint"], entry["data_manifest"]) \
        == (state["job_id"], state["checkpoint"], state["manifest"])
    assert entry["previous_path"].endswith("/head0") and head["path"] == state["checkpoint"]
    assert entry["evaluation_run"].endswith("-retrain-eval")
    assert entry["profile"].startswith(entry["evaluation_run"])


def test_the_same_candidate_against_the_baseline_is_refused(dirs):
    ev, _ = dirs
    res = gate.judge(ev, CAND, BASE, [1], looks=_gate_look())
    (row,) = res.rows
    assert not res.passed and row.verdict == "undecided" and row.low < 1.0 < row.high
    assert row.why.startswith("undecided, not faster")


def test_the_evaluation_summary_recomputes(dirs):
    ev, _ = dirs
    stored = pd.read_csv(FIX / "eval" / "summary.csv")
    again = summarise_dir(ev)
    assert list(again["variant"]) == list(stored["variant"]) == [BASE, CUR, CAND]
    assert_same_columns(again, stored, ["tok_s", "speedup", "speedup_ci_low", "speedup_ci_high",
                                        "accept_len"])
    rows = {r["variant"]: r for r in again.to_dict("records")}
    assert f"{rows[BASE]['tok_s']:.1f}" == "664.9"
    assert (f"{rows[CUR]['tok_s']:.1f}", f"{rows[CUR]['speedup']:.2f}", rows[CUR]["verdict"]) \
        == ("303.3", "0.46", "slower")
    assert (f"{rows[CUR]['speedup_ci_low']:.2f}", f"{rows[CUR]['speedup_ci_high']:.2f}") == ("0.44", "0.48")
    c = rows[CAND]
    assert (f"{c['tok_s']:.1f}", f"{c['speedup']:.2f}", c["verdict"], f"{c['accept_len']:.2f}") \
        == ("706.1", "1.06", "undecided", "2.58")
    assert (f"{c['speedup_ci_low']:.2f}", f"{c['speedup_ci_high']:.2f}") == ("0.94", "1.19")
    assert f"{rows[CUR]['accept_len']:.2f}" == "1.00"


def test_weak_spots_and_held_out_prompts(dirs):
    ev, src = dirs
    found = spots(variant_requests(src, CUR), "prompt")
    assert len(found) == 24 and all(s.accept_len is not None and s.accept_len < 1.03 for s in found)
    chosen = pick(found, lowest=12)
    out = (FIX / "retrain.out").read_text().splitlines()
    printed = [ln.split("\t")[1] for ln in out if ln.startswith("*\t")]  # the '*' rows: the chosen spots
    assert [s.key for s in chosen] == printed
    assert f"{overall(variant_requests(src, CUR)).accept_len:.2f}" == "1.00"
    manifest = json.loads(gzip.decompress((FIX / "manifest.json.gz").read_bytes()))
    sources = pd.Series([r["source"] for r in manifest["rows"]]).value_counts().to_dict()
    assert sources == {"traffic": 256, "weak": 6, "rest": 3}
    assert [w["key"] for w in manifest["weak"]] == printed
    # the evaluation ran on the held-out prompts, none of which the training data saw
    trained = {r["id"] for r in manifest["rows"] if r["source"] in ("weak", "rest")}
    held = {f"{h['suite']}/{h['prompt_id']}" for h in manifest["held_out"]}
    rq = pd.read_csv(ev / "requests.csv")
    evaluated = set(rq["suite"].astype(str) + "/" + rq["prompt_id"].astype(str))
    assert evaluated == held and len(held) == 15 and not held & trained
    assert len(trained) == 9 and trained < {s.key for s in found}
    assert evaluated <= {s.key for s in found}


def test_watch_raises_the_alarm_on_the_source_run(dirs):
    ev, src = dirs
    check = watch.compare(read_profile(ev / "speculation_profile.json"), src, CUR)
    assert check.alarm
    printed = (FIX / "watch.out").read_text()
    rows = {r.category: r for r in check.rows}
    assert set(rows) == {"code", "(all)"}
    for r in rows.values():
        assert r.line() in printed and r.alarm
    assert "recorded 2.58 [2.23-2.98]\tnow 1.00 [1.00-1.00]\t24 requests" in printed


def _stamps(log: bytes) -> list[tuple[datetime, str]]:
    out = []
    for line in log.decode().splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)", line)
        if m:
            out.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"), m.group(2)))
    return out


def _first_decode_after_ready(name: str) -> tuple[float, float]:
    """(seconds from 'fired up' to the first Decode batch, the longest silence after 'fired up')."""
    st = _stamps(gzip.decompress((FIX / name).read_bytes()))
    ready = next(t for t, m in st if "fired up" in m)
    decode = next(t for t, m in st if t >= ready and m.startswith("Decode batch"))
    after = [t for t, _ in st if t >= ready]
    gaps = [(b - a).total_seconds() for a, b in zip(after, after[1:], strict=False)]
    return (decode - ready).total_seconds(), max(gaps)


def test_the_timings_the_doc_quotes():
    section = _doc_section()
    warm = (FIX / "timeline-warm.txt").read_text()
    loop = (FIX / "timeline-loop.txt").read_text()
    w = [int(x) for x in re.findall(r"\+(\d+)s\]", warm)]
    lp = [int(x) for x in re.findall(r"\+(\d+)s\]", loop)]
    assert (w[2], w[3], w[-1]) == (91, 431, 444) and "warm: done" in warm
    assert (lp[2], lp[3], lp[4], lp[-1]) == (174, 174, 380, 382) and "retrain exited 0" in loop
    # the warm call's first EAGLE3 request: 83 s of silence after ready, then the first decode
    first, silence = _first_decode_after_ready("warm-eagle3.log.gz")
    assert (first, silence) == (84.0, 83.0)
    # a fresh machine with that call's caches restored: greedy requests decode at once, the first
    # concurrent burst (half of it sampled) still stalls 75 s
    first, silence = _first_decode_after_ready("cached-serve-eagle3.log.gz")
    assert (first, silence) == (2.0, 75.0)
    served = (FIX / "cached-serve-summary.txt").read_text()
    assert "[setup] restored jit-retrain.tar.gz" in served and "mode=eagle3 ready=1 startup_s=91" in served
    for figure in ("444 s", "382 s", "340 s", "83 s", "75 s", "206 s", "2.33x [2.05-2.64]",
                   "x2.58 [2.23-2.98]", "664.9", "303.3", "706.1", "1.06x [0.94-1.19]", "0.46x [0.44-0.48]",
                   "265 rows", "5.6 s", "1.45", "0.96"):
        assert figure in section, figure


def test_training_ran_the_steps_the_doc_quotes():
    job = json.loads((FIX / "train-job.json").read_text())
    assert job["spec"]["max_steps"] == 300 and job["spec"]["init_from"].endswith("/head0")
    err = (FIX / "retrain-err.txt").read_text()
    assert "step 300/300 loss 1.450 acc 0.960 checkpoints 1" in err
    assert "regen [done] 265/265 rows (265 ok, 0 errors this run): 47.25 rows/s, 4536 output tok/s" in err
