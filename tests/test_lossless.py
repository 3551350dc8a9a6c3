"""The lossless audit's analysis (harness.analysis.lossless, logprob_paths) on records written here: a
divergence at a near-tie is numerics, one at a wide margin is a broken verify path; the rate test against
the control; the expectations a suite declares."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis import lossless
from harness.analysis.logprob_paths import ScoredPath, Tok, margin_at, next_anchor, offsets, parse_answer
from harness.bench.audit import control_concurrency

BASE = " the cache holds the answer"
WORDS = [" the", " cache", " holds", " the", " answer"]


def _path(text: str, words: list[str], alts: dict[int, list[tuple[str, float]]], prefix: int = 0,
          start: int = 0) -> ScoredPath:
    return ScoredPath(text, prefix, [Tok(w, -0.1, tuple(alts.get(i, []))) for i, w in enumerate(words)],
                      start)


def test_offsets_walk_pieces_of_characters_and_tokens_the_text_leaves_out():
    text = "a\u2014b c"
    # the dash in two pieces (each decodes alone as U+FFFD), then a special token the text does not hold
    assert offsets(["a", "\ufffd", "\ufffdb", " c", "<|eot_id|>"], text) == [0, 1, 2, 3, 5]
    assert offsets([" x", " y"], "pre x y", 3) == [3, 5]


def test_margin_at_a_near_tie_and_at_a_wrong_token():
    path = _path(BASE, WORDS, {1: [(" cache", -0.70), (" model", -0.75), (" tree", -3.0)]})
    tie = margin_at([path], BASE, " the model is", 5)
    assert tie is not None and not tie.bound
    assert (tie.token, tie.base_token, tie.spec_token) == (1, " cache", " model")
    assert tie.margin == pytest.approx(-0.1 - -0.75)  # the token's own logprob (-0.1) against the runner-up
    wrong = margin_at([path], BASE, " the tree", 5)
    assert wrong.margin == pytest.approx(-0.1 + 3.0)
    # not among the alternatives: at least as far as the last of them
    far = margin_at([path], BASE, " the zebra", 5)
    assert far.bound and far.margin == pytest.approx(-0.1 + 3.0) and far.spec_token.startswith(" zebra")


def test_a_path_scores_only_where_its_context_is_the_baselines():
    other = _path(" the model is", [" the", " model", " is"], {})
    assert margin_at([other], BASE, " the cache loses", 12) is None  # its token 1 is not the baseline's
    # an anchored continuation from the baseline's own text through " cache" scores position 2
    anchored = _path(" the cache holds the answer", [" holds", " the", " answer"],
                     {0: [(" holds", -0.2), (" loses", -0.3)]}, prefix=len(" the cache"), start=2)
    got = margin_at([other, anchored], BASE, " the cache loses", 12)
    assert got is not None and (got.token, got.spec_token) == (2, " loses")


def test_next_anchor_follows_the_baseline_past_each_point_where_the_control_left_it():
    free = _path(" the model is", [" the", " model", " is"], {1: [(" model", -0.7), (" cache", -0.72)]})
    assert next_anchor([free], BASE) == (len(" the cache"), 2)  # through the baseline's token, two tokens in
    anchored = _path(BASE, WORDS[2:], {}, prefix=len(" the cache"), start=2)
    assert next_anchor([free, anchored], BASE) is None  # scored whole
    assert next_anchor([_path(" x", [" x"], {})], BASE) is None  # nothing on the baseline's text


def test_parse_answer_reads_chat_and_completions_logprobs():
    chat = {"choices": [{"message": {"content": " a b"}, "logprobs": {"content": [
        {"token": " a", "bytes": [32, 97], "logprob": -0.1,
         "top_logprobs": [{"token": " a", "logprob": -0.1}, {"token": " c", "logprob": -2.0}]},
        {"token": " b", "logprob": -0.2, "top_logprobs": []}]}}]}
    text, toks = parse_answer(chat, True)
    assert text == " a b" and toks[0].entries() == [(" a", -0.1), (" c", -2.0)] and toks[1].text == " b"
    comp = {"choices": [{"text": " a b", "logprobs": {
        "tokens": [" a", " b"], "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{" a": -0.1, " d": -1.0}, {" b": -0.2}], "text_offset": [-1, -1]}}]}
    text, toks = parse_answer(comp, False)
    assert toks[0].alts == ((" a", -0.1), (" d", -1.0))
    assert parse_answer({"choices": [{"message": {"content": "x"}, "logprobs": None}]}, True) == ("x", [])
    assert parse_answer({"error": "no"}, True) is None


def test_fisher_one_sided_and_the_control_concurrency():
    assert lossless.fisher_greater(3, 3, 0, 3) == pytest.approx(1 / 20)
    assert lossless.fisher_greater(0, 5, 5, 5) == pytest.approx(1.0)
    assert control_concurrency([1, 4]) == 2 and control_concurrency([2, 3]) == 4
    assert control_concurrency([8]) == 2


# --- row_audit on a run's records -------------------------------------------------------------------------


def _records(answers: dict[str, list[str]], conc: int = 1):
    """requests.csv and outputs.csv rows: variant -> one answer per prompt p0, p1, ..."""
    req, out = [], []
    for variant, texts in answers.items():
        for i, text in enumerate(texts):
            rid = f"s/p{i}"
            req.append({"variant": variant, "phase": f"s@c{conc}#r1", "request_id": rid, "suite": "s",
                        "prompt_id": f"p{i}", "concurrency": conc, "ok": True, "turn": 1})
            out.append({"variant": variant, "phase": f"s@c{conc}#r1", "request_id": rid, "text": text,
                        "reasoning": float("nan")})
    return pd.DataFrame(req), pd.DataFrame(out)


def _audit(free: list[str], paths: dict[int, ScoredPath], expects: dict[int, dict] | None = None,
           margin: float = 0.5) -> lossless.Audit:
    audit = lossless.Audit()
    audit.add({"kind": "audit", "variant": "base", "concurrency": 2, "margin": margin})
    for i, text in enumerate(free):
        p = paths.get(i) or _path(text, [text], {})
        audit.add({"kind": "path", "variant": "base", "suite": "s", "prompt_id": f"p{i}", "source": "free",
                   "prefix": p.prefix, "text": p.text,
                   "tokens": [[t.text, t.logprob, [list(a) for a in t.alts]] for t in p.toks]})
    for i, exp in (expects or {}).items():
        audit.add({"kind": "expect", "suite": "s", "prompt_id": f"p{i}", "expect": exp})
    return audit


TIE = {1: [(" cache", -0.1), (" model", -0.18), (" tree", -4.0)]}


def test_divergences_at_near_ties_are_lossless():
    base = [BASE] * 6
    spec = [" the model is"] + [BASE] * 5
    req, out = _records({"base": base, "spec": spec})
    audit = _audit(base, {0: _path(BASE, WORDS, TIE)})
    got = lossless.row_audit(req, out, audit, "base", "spec", 1)
    assert got["lossless_verdict"] == "lossless", got
    assert got["divergence_rate"] == pytest.approx(1 / 6) and got["control_divergence_rate"] == 0.0
    assert got["max_divergence_margin"] == pytest.approx(0.08)
    assert got["lossless_detail"].startswith("1 divergences, all near-ties (max 0.08 nats)")
    # the baseline's own row: its control alone
    assert lossless.row_audit(req, out, audit, "base", "base", 1) == {"control_divergence_rate": 0.0}


def test_a_wrong_token_at_a_wide_margin_is_suspect_with_its_worst_case():
    base = [BASE] * 6
    spec = [" the tree is"] + [BASE] * 5
    req, out = _records({"base": base, "spec": spec})
    got = lossless.row_audit(req, out, _audit(base, {0: _path(BASE, WORDS, TIE)}), "base", "spec", 1)
    assert got["lossless_verdict"] == "suspect"
    assert "1 of 1 divergences at 0.5 nats or more: s/p0 token 1: ' cache' vs ' tree' 3.90 nats" \
        in got["lossless_detail"]
    # the threshold is the run's: at 5 nats the same divergence is a near-tie
    got = lossless.row_audit(req, out, _audit(base, {0: _path(BASE, WORDS, TIE)}, margin=5.0), "base", "spec",
                             1)
    assert got["lossless_verdict"] == "lossless"


def test_more_divergences_than_the_control_is_suspect_even_at_near_ties():
    base = [BASE] * 12
    spec = [" the model is"] * 12
    req, out = _records({"base": base, "spec": spec})
    audit = _audit(base, {i: _path(BASE, WORDS, TIE) for i in range(12)})
    got = lossless.row_audit(req, out, audit, "base", "spec", 1)
    assert got["lossless_verdict"] == "suspect" and got["divergence_rate"] == 1.0
    assert "divergence rate 1.00 above the control's 0.00 (one-sided Fisher p=" in got["lossless_detail"]


def test_unreached_divergences_and_a_missing_control_are_unresolved():
    base = [BASE] * 3
    req, out = _records({"base": base, "spec": [" the model is", BASE, BASE]})
    audit = _audit(base, {})  # the free answers carry no alternatives at the divergence
    got = lossless.row_audit(req, out, audit, "base", "spec", 1)
    assert got["lossless_verdict"] == "unresolved" and "not reached" in got["lossless_detail"]
    empty = lossless.Audit()
    empty.add({"kind": "audit", "variant": "base", "error": "the baseline's server answered no request"})
    got = lossless.row_audit(req, out, empty, "base", "spec", 1)
    assert got["lossless_verdict"] == "unresolved" and "answered no request" in got["lossless_detail"]
    assert lossless.row_audit(req, out, None, "base", "spec", 1) == {}  # no audit ran: no columns


def test_an_expectation_the_baseline_met_and_speculation_broke_is_suspect():
    good, bad = '{"city": "Paris"}', '{"city": "Paris"'
    req, out = _records({"base": [good, "plain", good], "spec": [good, "plain", bad]})
    schema = {"schema": {"type": "object", "required": ["city"]}}
    audit = _audit([good, "plain", good], {}, {0: schema, 2: schema, 1: {"regex": "^plain$"}})
    got = lossless.row_audit(req, out, audit, "base", "spec", 1)
    assert got["lossless_verdict"] == "suspect"
    assert "1 answers break the expectation the baseline's met: s/p2: not JSON" in got["lossless_detail"]
    # a baseline that breaks it too: no finding against speculation
    req, out = _records({"base": [good, "plain", bad], "spec": [good, "plain", bad]})
    got = lossless.row_audit(req, out, _audit([good, "plain", bad], {}, {2: schema}), "base", "spec", 1)
    assert got["lossless_verdict"] == "lossless" and got["divergence_rate"] == 0.0


def test_read_audit_skips_a_line_cut_by_a_kill(tmp_path):
    lines = [json.dumps({"kind": "audit", "variant": "base", "margin": 0.5}),
             json.dumps({"kind": "path", "variant": "base", "suite": "s", "prompt_id": "p0", "source": "free",
                         "text": " a", "tokens": [[" a", -0.1, [[" a", -0.1]]]]}),
             '{"kind": "path", "variant": "ba']
    (tmp_path / lossless.AUDIT_FILE).write_text("\n".join(lines))
    audit = lossless.read_audit(tmp_path)
    assert set(audit.passes) == {"base"} and audit.free == {("base", "s", "p0"): " a"}
    assert lossless.read_audit(tmp_path / "none") is None


def test_a_server_without_logprobs_still_gives_the_control():
    base = [BASE] * 4
    req, out = _records({"base": base, "spec": [" the model is", BASE, BASE, BASE]})
    audit = lossless.Audit()
    audit.add({"kind": "audit", "variant": "base",
               "error": "the baseline's server answered without logprobs"})
    for i, text in enumerate(base):
        audit.add({"kind": "path", "variant": "base", "suite": "s", "prompt_id": f"p{i}", "source": "free",
                   "text": text, "tokens": []})
    got = lossless.row_audit(req, out, audit, "base", "spec", 1)
    assert got["control_divergence_rate"] == 0.0 and got["lossless_verdict"] == "unresolved"
    assert "answered without logprobs" in got["lossless_detail"]


def test_suite_expectations_are_typed_with_line_aware_errors(tmp_path):
    from harness.common.errors import InputError
    from harness.inputs.suites import Suite, load_suite, write_suite_yaml

    path = tmp_path / "s.yaml"
    path.write_text("prompts:\n  - id: a\n    text: hi\n    expect:\n      regex: '(open'\n")
    with pytest.raises(InputError) as err:
        load_suite(path)
    assert str(err.value).startswith(f"{path}:5: prompts[0].expect.regex: does not compile")
    path.write_text("prompts:\n  - id: a\n    text: hi\n    response_format:\n      type: json_schema\n"
                    "      json_schema:\n        name: x\n        schema:\n          type: object\n"
                    "          propertyNames: {pattern: x}\n")
    with pytest.raises(InputError) as err:
        load_suite(path)
    assert f"{path}:10: prompts[0].response_format.json_schema.schema.propertyNames: schema keyword " \
        "'propertyNames' is not one draftbench checks" in str(err.value)
    path.write_text("prompts:\n  - {id: a, text: hi, expect: {}}\n")
    with pytest.raises(InputError, match="give at least one of json: true, schema or regex"):
        load_suite(path)
    path.write_text("prompts:\n  - {id: a, text: hi, expect: {json: true, regex: '^[{]'}}\n"
                    "  - {id: b, text: hi, response_format: {type: json_object}}\n")
    suite = load_suite(path)
    a, b = (p.expectation for p in suite.prompts)
    assert a.violation('{"x": 1}') is None and a.violation("[1]").startswith("no match for regex")
    assert b.violation("{").startswith("not JSON") and b.violation("{}") is None
    # written back and read again (plan.resolved.json inlines suites the same way): the names a suite writes
    again = load_suite(write_suite_yaml(suite, tmp_path / "again.yaml"))
    assert again == suite and Suite.model_validate(suite.model_dump(mode="json")) == suite
