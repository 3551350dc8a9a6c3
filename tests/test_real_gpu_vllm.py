"""Real vLLM 0.26.0 against real SGLang 0.5.15.post1 on one H200 (2026-12-04; issue 29):
`benchmarks/h200/vllm.sh measure` with MEASURE_ARMS=all REPEATS=1 MAX_TOKENS=192 ran `draftbench run` over
the trained tiny target and its EAGLE-3 head on both engines (baseline and EAGLE-3 3/1/4, c1 and c8, the
same 64 held-out prompts); the call's time ran out as vLLM's EAGLE-3 server compiled, and the next call
finished it with `draftbench run --resume`, then ran `vllm bench serve` on the two vLLM servers
(tests/fixtures/vllm-0.26.0/measure/).

Every figure docs/vllm.md and the README quote is recomputed here from the records: through draftbench's
own summary (which must reproduce what the H200 wrote) and by hand (tok/s from phases.csv, accept length
from the /metrics counter deltas, the log lines through the vLLM parser, vllm bench serve's own JSON)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.summary import summarise_dir
from harness.engines.vllm.logline import parse_line
from tests.fixture_dirs import assert_same_columns, unpacked

FIX = Path(__file__).parent / "fixtures" / "vllm-0.26.0" / "measure"
ROOT = Path(__file__).parent.parent
DOCS, README = ROOT / "docs" / "vllm.md", ROOT / "README.md"
ARMS = {"baseline": ("baseline", "vllm-base"), "EAGLE-3 3/1/4": ("eagle3", "vllm-eagle3")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "run", tmp_path_factory.mktemp("h200") / "run")


@pytest.fixture(scope="module")
def rebuilt(run_dir) -> pd.DataFrame:
    return summarise_dir(run_dir)


def _row(df: pd.DataFrame, variant: str, conc: int) -> pd.Series:
    got = df[(df["variant"] == variant) & (df["concurrency"] == conc)]
    assert len(got) == 1, (variant, conc)
    return got.iloc[0]


def _bench(variant: str) -> dict:
    return json.loads((FIX / "bench" / f"{variant}.json").read_text())


def test_the_rebuilt_summary_is_what_the_h200_wrote(run_dir, rebuilt):
    """Every engine's own rows, every column (the lossless audit's too): the summary reads back the same."""
    stored = pd.read_csv(run_dir / "summary.csv")
    own = stored[stored["status"] != "cross-engine"].reset_index(drop=True)
    again = rebuilt[rebuilt["status"] != "cross-engine"].reset_index(drop=True)
    assert list(again["variant"]) == list(own["variant"]) and len(own) == 8
    numeric = [c for c in own.columns if pd.api.types.is_numeric_dtype(own[c]) and c != "baseline"]
    assert_same_columns(again, own, numeric)
    for col in ("verdict", "verdict_reason", "lossless_verdict", "engine", "compared_with"):
        assert list(again[col].fillna("")) == list(own[col].fillna("")), col
    # the baselines' cross rows as the H200 wrote them (before the EAGLE-3 arms had theirs)
    for conc in (1, 8):
        assert _row(stored, "vllm-base vs baseline", conc)["speedup"] == pytest.approx(
            _row(rebuilt, "vllm-base vs baseline", conc)["speedup"], rel=1e-12)


def test_tok_s_and_speedups_by_hand(run_dir, rebuilt):
    """tok/s = the phases' output tokens / their wall time; speedup = tok/s over the same engine's baseline's;
    a cross row = tok/s on vLLM / tok/s on SGLang of the same arm."""
    ph = pd.read_csv(run_dir / "phases.csv")
    tok = {(v, c): g["output_tokens"].sum() / g["wall_s"].sum()
           for (v, c), g in ph.groupby(["variant", "concurrency"])}
    assert set(ph["requests"]) == {64, 128} and set(ph["output_tokens"]) == {12288, 24576}  # 192 each, all
    for (v, c), rate in tok.items():
        assert _row(rebuilt, v, c)["tok_s"] == pytest.approx(rate, rel=1e-9)
    for spec, base in (("eagle3", "baseline"), ("vllm-eagle3", "vllm-base")):
        for c in (1, 8):
            assert _row(rebuilt, spec, c)["speedup"] == pytest.approx(tok[spec, c] / tok[base, c], rel=1e-9)
    for sgl, vll in ARMS.values():
        for c in (1, 8):
            cross = _row(rebuilt, f"{vll} vs {sgl}", c)
            assert cross["speedup"] == pytest.approx(tok[vll, c] / tok[sgl, c], rel=1e-9)
            assert cross["speedup_ci_low"] < cross["speedup"] < cross["speedup_ci_high"]


def test_accept_length_from_metrics_logs_and_vllm_bench(run_dir, rebuilt):
    """vLLM's accept length three ways: /metrics counter deltas per phase (draftbench's figure), the
    SpecDecoding log lines, and vllm bench serve's own /metrics reading on the same server afterwards."""
    ph = pd.read_csv(run_dir / "phases.csv").set_index(["variant", "concurrency"])
    c1, c8 = ph.loc[("vllm-eagle3", 1)], ph.loc[("vllm-eagle3", 8)]
    assert (c1["server_spec_drafts"], c1["server_spec_accepted_tokens"]) == (3760, 8554)
    # greedy and the same 64 prompts: each of the c8 phase's two passes drafted and accepted exactly as c1
    assert (c8["server_spec_drafts"], c8["server_spec_accepted_tokens"]) == (2 * 3760, 2 * 8554)
    assert c1["server_spec_draft_tokens"] == 3 * c1["server_spec_drafts"]  # 3 speculative tokens
    al = 1 + 8554 / 3760
    assert al == pytest.approx(3.275, abs=5e-4)
    for c in (1, 8):
        assert _row(rebuilt, "vllm-eagle3", c)["accept_len"] == pytest.approx(al, rel=1e-9)
    bench = _bench("vllm-eagle3")
    assert (bench["spec_decode_num_drafts"], bench["spec_decode_accepted_tokens"]) == (3760, 8554)
    assert bench["spec_decode_acceptance_length"] == pytest.approx(al, rel=1e-9)
    per_pos = [float(x) for x in str(c1["server_accept_per_pos"]).split()]
    assert per_pos == pytest.approx(bench["spec_decode_per_position_acceptance_rates"], abs=5e-5)
    # the log: one SpecDecoding line per 10 s interval, so a phase's log figure is that interval's sample
    lines = gzip.open(FIX / "logs" / "vllm-eagle3.log.gz", "rt", encoding="utf-8").read().splitlines()
    parsed = [parse_line(line, i) for i, line in enumerate(lines, 1)]
    spec = [w for w in parsed if w is not None and w.kind == "decode"]
    assert [round(w.accept_len, 2) for w in spec] == [3.30, 3.23]
    assert all(abs(w.accept_len / al - 1) < 0.05 for w in spec)
    for c, logged in ((1, 3.30), (8, 3.23)):
        row = _row(rebuilt, "vllm-eagle3", c)
        assert row["accept_len_log"] == pytest.approx(logged) and bool(row["accept_sources_agree"])
        assert row["accept_len_source"] == "server"


def _requests(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "requests.csv")


def test_draftbench_against_vllm_bench_on_the_same_servers(run_dir, rebuilt):
    """The same prompts (the same prompt tokens), the same 192 output tokens, c8: draftbench's tok/s is
    0.88x of vllm bench serve's on both arms, so the speedups agree (1.52x against 1.53x)."""
    rq = _requests(run_dir)
    for v in ("vllm-base", "vllm-eagle3"):
        one = rq[(rq["variant"] == v) & (rq["concurrency"] == 8) & (rq["replay_pass"] == 1)]
        b = _bench(v)
        assert one["prompt_tokens"].sum() == b["total_input_tokens"] == 17431
        assert one["output_tokens"].sum() == b["total_output_tokens"] == 12288
        assert b["completed"] == 64 and b["max_concurrency"] == 8
    ours = {v: _row(rebuilt, v, 8)["tok_s"] for v in ("vllm-base", "vllm-eagle3")}
    theirs = {v: _bench(v)["output_throughput"] for v in ours}
    ratios = [ours[v] / theirs[v] for v in ours]
    assert ratios == pytest.approx([0.886, 0.880], abs=1e-3)
    # not a backlog between server and client: the client's mean end-to-end within 7 ms of the server's own
    ph = pd.read_csv(run_dir / "phases.csv")
    for p in ph[ph["variant"].str.startswith("vllm")].itertuples():
        mine = rq[(rq["variant"] == p.variant) & (rq["phase"] == p.phase)]["e2e_ms"].mean()
        assert 0 < mine - p.server_e2e_ms_mean < 7, (p.variant, p.concurrency)
    one = rq[(rq["variant"] == "vllm-base") & (rq["concurrency"] == 8) & (rq["replay_pass"] == 1)]
    span = (one["t_end"].max() - one["t_send"].min())
    assert round(span, 2) == 3.33 and round(_bench("vllm-base")["duration"], 2) == 3.07
    spec = _row(rebuilt, "vllm-eagle3", 8)
    bench_speedup = theirs["vllm-eagle3"] / theirs["vllm-base"]
    assert bench_speedup == pytest.approx(1.526, abs=1e-3)
    assert spec["speedup_ci_low"] < bench_speedup < spec["speedup_ci_high"]
    assert abs(spec["speedup"] / bench_speedup - 1) < 0.01


def _x(v: float) -> str:
    return f"{v:.2f}x"


def doc_rows(rebuilt: pd.DataFrame) -> list[str]:
    """The markdown rows docs/vllm.md quotes, rendered from the rebuilt summary and vllm bench's JSON."""
    rows = []
    for arm, (sgl, vll) in ARMS.items():  # the cross-engine table (the README has it too)
        for c in (1, 8):
            s, v, x = _row(rebuilt, sgl, c), _row(rebuilt, vll, c), _row(rebuilt, f"{vll} vs {sgl}", c)
            word = str(x["verdict_reason"]).split(":")[0]
            al = "-" if pd.isna(s["accept_len"]) else f"{s['accept_len']:.2f} / {v['accept_len']:.2f}"
            rows.append(f"| {arm} | {c} | {s['tok_s']:.1f} | {v['tok_s']:.1f} | {_x(x['speedup'])} "
                        f"({x['speedup_ci_low']:.2f}-{x['speedup_ci_high']:.2f}), {word} | {al} |")
    for engine, spec in (("SGLang 0.5.15.post1", "eagle3"), ("vLLM 0.26.0", "vllm-eagle3")):  # per engine
        for c in (1, 8):
            r = _row(rebuilt, spec, c)
            rows.append(f"| {engine} | {c} | {_x(r['speedup'])} ({r['speedup_ci_low']:.2f}-"
                        f"{r['speedup_ci_high']:.2f}) | {r['verdict']} | {r['break_even_accept_len']:.2f} |")
    for arm, v in (("baseline", "vllm-base"), ("EAGLE-3 3/1/4", "vllm-eagle3")):  # against vllm bench serve
        r, b = _row(rebuilt, v, 8), _bench(v)
        rows.append(f"| {arm} | {r['tok_s']:.1f} | {b['output_throughput']:.1f} | "
                    f"{r['tok_s'] / b['output_throughput']:.3f} | "
                    f"{r['ttft_p50_ms']:.1f} / {b['median_ttft_ms']:.1f} |")
    return rows


def test_the_docs_quote_these_figures(rebuilt):
    docs, readme = DOCS.read_text(encoding="utf-8"), README.read_text(encoding="utf-8")
    rows = doc_rows(rebuilt)
    assert len(rows) == 10
    missing = [r for r in rows if r not in docs]
    assert not missing, missing
    assert [r for r in rows[:4] if r not in readme] == []  # the cross-engine table, in the README too


def test_the_start_up_times_the_docs_quote(run_dir):
    """docs/vllm.md's "How the calls went": from the end of one arm to the next arm's first measured phase
    (start-up and warmup), from attempts.csv's phase starts and phases.csv's wall times; the run's start is
    its id, the resume's is provenance.json's started_at (the resume's, as the H200 wrote it)."""
    from datetime import UTC, datetime

    att = pd.read_csv(run_dir / "attempts.csv").set_index(["variant", "phase"])["wall_start"]
    ph = pd.read_csv(run_dir / "phases.csv").set_index(["variant", "phase"])["wall_s"]
    c1, c8 = "stdlib-heldout@c1#r1", "stdlib-heldout@c8#r1"

    def end(v: str) -> float:
        return att[(v, c8)] + ph[(v, c8)]

    def epoch(stamp: str, fmt: str) -> float:
        return datetime.strptime(stamp, fmt).replace(tzinfo=UTC).timestamp()

    prov = json.loads((run_dir / "provenance.json").read_text())
    started = epoch(prov["run_id"][:15], "%Y%m%d-%H%M%S")
    resumed = epoch(prov["started_at"], "%Y-%m-%dT%H:%M:%S%z")
    got = [att[("baseline", c1)] - started, att[("vllm-base", c1)] - end("baseline"),
           att[("eagle3", c1)] - end("vllm-base"), att[("vllm-eagle3", c1)] - resumed]
    assert [round(x) for x in got] == [133, 128, 90, 89]
    # the first call's draftbench run had 510 s (RUN_S) from its start: what was left after SGLang's EAGLE-3
    assert round(started + 510 - end("eagle3")) == 75
    # the calls themselves (calls/: their printouts, and the wall times the device reported)
    calls = FIX / "calls"
    wall = dict(line.split("\t") for line in (calls / "timeline.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert sorted(float(wall[f"carry {n}"]) for n in (1, 2, 3)) == [0.3, 0.3, 0.4]
    assert round(float(wall["install"])) == 52
    assert "[vllm.sh install +51s] exit 0" in (calls / "install.log").read_text()
    assert json.loads((calls / "import.json").read_text())["seconds"] == 33.1
    assert "draftbench run exited 124" in (calls / "measure.log").read_text()  # RUN_S ran out
    resume = (calls / "resume.log").read_text()
    assert "draftbench run --resume exited 0" in resume and "[vllm.sh measure +242s] exit 0" in resume
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    for said in ("Carry 1-3 took 0.3-0.4 s each; install 51 s (the import check 33 s)",
                 "ran out of its 510 s", "(242 s for the call)", "133 s for SGLang's baseline",
                 "128 s for vLLM's", "90 s for SGLang's EAGLE-3", "more than the 75 s left",
                 "EAGLE-3 measuring 89 s after the resume began"):
        assert said in text, said
