"""The lossless audit on the H200 (2026-12-03, `benchmarks/h200/decide.sh lossless` after `decide.sh prep`;
fixtures in tests/fixtures/sglang-0.5.15.post1/lossless/): real SGLang 0.5.15.post1, the trained tiny target
against its EAGLE-3 head, greedy, c1 and c8 once, then the audit's untimed pass on the baseline's server.
Every figure docs/real-gpu.md quotes ("The lossless audit on the H200") is recomputed here from the records
through draftbench's own code (harness.analysis.lossless, summarise_dir), and the verdict is shown to rest on
what it claims to: a threshold under the largest |margin|, or a control that never differs, turns it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import lossless
from harness.analysis.logprob_paths import margin_at
from harness.analysis.lossless import ALPHA, Audit, answers, compare, control, fisher_greater, row_audit
from harness.analysis.outputs import first_divergence
from harness.analysis.summary import read_tables
from tests.fixture_dirs import assert_same_columns, unpacked

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "lossless"
DOC = Path(__file__).parent.parent / "docs" / "real-gpu.md"
BASE, SPEC, SUITE = "baseline", "eagle3", "stdlib-heldout"
LOSSLESS = ("lossless_verdict", "divergence_rate", "control_divergence_rate", "max_divergence_margin",
            "lossless_detail")
# per concurrency: same answers of 64, divergences, the control's (differ, compared), the rate test's p
ROWS = {1: (56, 8, (12, 64), "0.89"), 8: (53, 11, (7, 64), "0.22")}
# the divergences' margins in nats, signed: ties, 1/32 and 1/16
MARGINS = {1: [-0.0625] + [0.0] * 5 + [0.03125] * 2, 8: [0.0] * 7 + [0.03125] * 3 + [0.0625]}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "run", tmp_path_factory.mktemp("h200-lossless") / "run")


@pytest.fixture(scope="module")
def records(run_dir) -> tuple[pd.DataFrame, pd.DataFrame, Audit]:
    requests, outputs = read_tables(run_dir, ("requests.csv", "outputs.csv"))
    audit = lossless.read_audit(run_dir)
    assert audit is not None
    return requests, outputs, audit


def _report_row(conc: int) -> dict:
    rows = json.loads((FIX / "lossless-report.json").read_text())["rows"]
    return next(r for r in rows if r["variant"] == SPEC and r["concurrency"] == conc)


def test_the_audit_pass_answered_every_prompt_at_another_batch_shape(run_dir, records):
    _, _, audit = records
    plan = json.loads((run_dir / "plan.resolved.json").read_text())["run"]
    assert (plan["temperature"], plan["concurrency"], plan["lossless_audit"], plan["lossless_margin"]) \
        == (0.0, [1, 8], True, 0.5)
    head = audit.passes[BASE]
    # the control at c2, a concurrency no timed phase ran; every prompt answered with the top 5 alternatives
    assert (head["concurrency"], head["top_logprobs"], head["margin"], head["endpoint"]) \
        == (2, 5, 0.5, "chat")
    assert (head["prompts"], head["answered"], head["scored"], head["error"]) == (64, 64, 64, None)
    assert audit.expects == {}  # no prompt of the suite declares an expectation
    # 64 free answers (the control) and 15 continuations anchored on the baseline's own text
    prefixes = [path.prefix for paths in audit.paths.values() for path in paths]
    assert (len(audit.free), prefixes.count(0), len(prefixes)) == (64, 64, 79)
    assert "[decide.sh lossless +312s] draftbench run exited 0" in (FIX / "timeline.txt").read_text()


@pytest.mark.parametrize("conc", [1, 8])
def test_each_row_recomputes_near_ties_only_within_the_control(records, conc):
    requests, outputs, audit = records
    same, diverged, ctl, p_printed = ROWS[conc]
    threshold = audit.passes[BASE]["margin"]
    base = answers(requests, outputs, BASE, conc)
    cases, broken, n = compare(base, answers(requests, outputs, SPEC, conc), audit, BASE)
    assert (n, n - len(cases), len(cases), broken) == (64, same, diverged, [])
    # every divergence scored in the baseline's own context, none a bound, all under 0.5 nats
    margins = [c.margin for c in cases]
    assert all(m is not None and not m.bound for m in margins)
    values = [m.margin for m in margins if m is not None]
    assert sorted(values) == MARGINS[conc] and max(abs(v) for v in values) == 0.0625 < threshold
    assert control(base, audit, BASE) == ctl
    p = fisher_greater(len(cases), n, *ctl)
    assert f"{p:.2f}" == p_printed and p >= ALPHA
    row = row_audit(requests, outputs, audit, BASE, SPEC, conc)
    assert row == {"lossless_verdict": "lossless", "divergence_rate": diverged / 64,
                   "control_divergence_rate": ctl[0] / ctl[1], "max_divergence_margin": 0.0625,
                   "lossless_detail": f"{diverged} divergences, all near-ties (max 0.06 nats); rate "
                                      f"{diverged / 64:.2f} vs control {ctl[0] / ctl[1]:.2f} (p={p_printed})"}
    # the report the stage printed and kept (benchmarks/h200/lossless_report.py) says the same, case by case
    kept = _report_row(conc)
    assert (kept["compared"], kept["same"], kept["verdict"], kept["detail"]) \
        == (64, same, "lossless", row["lossless_detail"])
    assert kept["control"] == {"differ": ctl[0], "compared": ctl[1]}
    assert [(c["prompt"], c["char"], c["token"], c["base_token"], c["spec_token"], c["margin"], c["bound"])
            for c in kept["cases"]] \
        == [(f"{c.suite}/{c.prompt_id}", c.char, c.margin.token, c.margin.base_token, c.margin.spec_token,
             round(c.margin.margin, 4), False) for c in cases if c.margin is not None]
    printed = (FIX / "lossless-report.txt").read_text()
    assert f"{SPEC} c{conc} vs {BASE}: {same}/64 same ({100 * same / 64:.0f} %), verdict lossless" in printed
    assert f"  {row['lossless_detail']}\n" in printed


@pytest.mark.parametrize(("conc", "shared", "worst"), [(1, 4, 0.0625), (8, 3, 0.03125)])
def test_the_control_flips_the_same_kind_of_ties_often_at_the_same_places(records, conc, shared, worst):
    """The baseline against itself at c2: its own divergences' margins are as small, and several of the
    head's divergences part at the very character where the control's do."""
    requests, outputs, audit = records
    base = answers(requests, outputs, BASE, conc)
    spec = answers(requests, outputs, SPEC, conc).set_index("prompt_id")["answer"]
    own = {}
    for p, text in zip(base["prompt_id"], base["answer"], strict=True):
        free = audit.free[(BASE, SUITE, p)]
        if free != text:
            d = first_divergence(text, free)
            m = margin_at(audit.paths[(BASE, SUITE, p)], text, free, d)
            assert m is not None and not m.bound
            own[p] = (d, abs(m.margin))
    assert len(own) == ROWS[conc][2][0] and max(v[1] for v in own.values()) == worst
    kept = _report_row(conc)["control_cases"]
    assert {c["prompt"]: (c["char"], c["margin"]) for c in kept} \
        == {f"{SUITE}/{p}": (d, round(m, 4)) for p, (d, m) in own.items()}
    parts = {p: first_divergence(b, spec[p]) for p, b in zip(base["prompt_id"], base["answer"], strict=True)
             if b != spec[p]}
    assert sum(own.get(p, (None,))[0] == d for p, d in parts.items()) == shared


def test_the_negative_margin_is_the_control_taking_the_variants_token(records):
    """c1, s00056: the head wrote 'B' where the baseline's timed c1 answer has 'C'. Scored in the baseline's
    own context by its c2 pass, 'B' is the higher one (margin -1/16 nat): that pass took 'B' itself and went
    on as the head did. Near-ties flip either way with the batch shape, so the verdict compares |margin|."""
    requests, outputs, audit = records
    base = answers(requests, outputs, BASE, 1).set_index("prompt_id")["answer"]["s00056"]
    spec = answers(requests, outputs, SPEC, 1).set_index("prompt_id")["answer"]["s00056"]
    free = audit.free[(BASE, SUITE, "s00056")]
    assert first_divergence(base, spec) == first_divergence(base, free) == 301
    assert (base[301], spec[301], free[301]) == ("C", "B", "B") and first_divergence(spec, free) == 356
    m = margin_at(audit.paths[(BASE, SUITE, "s00056")], base, spec, 301)
    assert m is not None
    assert (m.token, m.base_token, m.spec_token, m.margin, m.bound) == (301, "C", "B", -0.0625, False)
    assert "stdlib-heldout/s00056 char 301 token 301: 'C' vs 'B' -0.0625" \
        in (FIX / "lossless-report.txt").read_text()


def test_the_summary_recomputes_the_lossless_columns_and_the_speed(run_dir, records):
    from harness.analysis.summary import summarise_dir

    requests, outputs, audit = records
    stored = pd.read_csv(run_dir / "summary.csv")
    again = summarise_dir(run_dir)
    assert list(zip(again["variant"], again["concurrency"], strict=True)) \
        == [(BASE, 1), (BASE, 8), (SPEC, 1), (SPEC, 8)]
    assert list(again["lossless_verdict"].fillna("")) == list(stored["lossless_verdict"].fillna("")) \
        == ["", "", "lossless", "lossless"]
    assert list(again["lossless_detail"].fillna("")) == list(stored["lossless_detail"].fillna(""))
    assert_same_columns(again, stored, LOSSLESS[1:4] + ("output_match", "first_divergence", "speedup",
                                                        "speedup_ci_low", "speedup_ci_high", "accept_len"))
    rows = again.set_index(["variant", "concurrency"])
    for conc, (_, diverged, ctl, _) in ROWS.items():
        spec = rows.loc[(SPEC, conc)]
        assert {k: spec[k] for k in LOSSLESS} == row_audit(requests, outputs, audit, BASE, SPEC, conc)
        assert rows.loc[(BASE, conc), "control_divergence_rate"] == ctl[0] / ctl[1]
        assert spec["output_match"] == 1 - diverged / 64
    one, eight = rows.loc[(SPEC, 1)], rows.loc[(SPEC, 8)]
    assert (one.verdict, round(one.speedup, 2), round(one.speedup_ci_low, 2), round(one.speedup_ci_high, 2)) \
        == ("faster", 1.44, 1.36, 1.52)
    assert (eight.verdict, round(eight.speedup, 2), round(eight.speedup_ci_low, 2),
            round(eight.speedup_ci_high, 2)) == ("undecided", 0.96, 0.86, 1.06)
    assert round(one.accept_len, 2) == round(eight.accept_len, 2) == 3.45
    assert (one.first_divergence, eight.first_divergence) == (30, 43)
    table = (FIX / "summary-table.txt").read_text()
    for conc, cells in ((1, "0.88         lossless  0.12      0.19     0.06"),
                        (8, "0.83         lossless  0.17      0.11     0.06")):
        assert next(ln for ln in table.splitlines() if ln.startswith(("*eagle3", "eagle3")) and
                    ln.split()[1] == str(conc)).count(cells) == 1


def test_the_verdict_turns_with_the_threshold_and_the_control(records):
    """What would make the verdict wrong, applied to the H200's own records: compared signed, the negative
    margin would slip under any threshold; without the control, any rate would pass."""
    requests, outputs, audit = records
    head = audit.passes[BASE]
    strict = dataclasses.replace(audit, passes={BASE: {**head, "margin": 0.05}})
    one = row_audit(requests, outputs, strict, BASE, SPEC, 1)
    assert one["lossless_verdict"] == "suspect"  # by its one |margin| of 0.0625, the negative one
    assert one["lossless_detail"] == ("1 of 8 divergences at 0.05 nats or more: "
                                      "stdlib-heldout/s00056 token 301: 'C' vs 'B' -0.06 nats")
    assert row_audit(requests, outputs, strict, BASE, SPEC, 8)["lossless_detail"].startswith(
        "1 of 11 divergences at 0.05 nats or more: stdlib-heldout/s00027 token 14: 'e' vs 'a' 0.06 nats")
    for conc, (_, diverged, _, _) in ROWS.items():
        base = answers(requests, outputs, BASE, conc)
        steady = dataclasses.replace(audit, free={(BASE, s, p): a for s, p, a in
                                                  zip(base["suite"], base["prompt_id"], base["answer"],
                                                      strict=True)})
        got = row_audit(requests, outputs, steady, BASE, SPEC, conc)
        p = fisher_greater(diverged, 64, 0, 64)
        assert p < ALPHA and got["lossless_verdict"] == "suspect" and got["control_divergence_rate"] == 0
        assert got["lossless_detail"] == (f"divergence rate {diverged / 64:.2f} above the control's 0.00 "
                                          f"(one-sided Fisher p={p:.3g})")
        none = row_audit(requests, outputs, dataclasses.replace(audit, free={}), BASE, SPEC, conc)
        assert none["lossless_verdict"] == "unresolved" and none["control_divergence_rate"] is None


def test_the_doc_quotes_these_figures():
    doc = " ".join(DOC.read_text().split())
    section = doc[doc.index("## The lossless audit on the H200"):doc.index("## Reproduce on your own node")]
    for figure in ("`decide.sh lossless`, after `decide.sh prep`", "312 s for the stage, exit 0",
                   "| eagle3 c1 | 56 of 64 (88 %) | 8: five at 0, two at 1/32, one at -1/16 | "
                   "12 of 64 (0.19) | 0.12 vs 0.19, p = 0.89 | **lossless** |",
                   "| eagle3 c8 | 53 of 64 (83 %) | 11: seven at 0, three at 1/32, one at 1/16 | "
                   "7 of 64 (0.11) | 0.17 vs 0.11, p = 0.22 | **lossless** |",
                   "Every one of the 19 is 0, 1/32 or 1/16 nat",
                   "`max_divergence_margin` is 0.0625 in both rows", "at most 0.0625 and 0.03125 nats",
                   "4 of the 8 c1 divergences and 3 of the 11 at c8", "prompt s00056, token 301",
                   "(margin -0.0625)", "for 55 characters", "a threshold of 0.05 nats",
                   "c1 1.44x (95 % CI 1.36-1.52), `faster`; c8 0.96x (95 % CI 0.86-1.06), `undecided`",
                   "server accept length 3.45 at both", "12 of the 19 divergences are exact ties"):
        assert figure in section, figure
    metrics = " ".join((DOC.parent / "metrics.md").read_text().split())
    assert "the control's, were all 0, 1/32 or 1/16 nat" in metrics
