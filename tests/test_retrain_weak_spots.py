"""Weak spots and the regeneration input, on hand-made records and run directories: histogram rates computed
by hand, ranking, the held-out split, dedup and the leak guard, traffic logs (OpenAI request JSONL) as a
source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness.common.errors import InputError
from harness.inputs.importers import import_suite
from harness.retrain import weak_spots as ws
from harness.retrain.dataset import MANIFEST, REGEN_INPUT, build_input, content_key, read_manifest


def test_histogram_rates_by_hand():
    # two requests: steps with 0/1/2 accepted drafts = [2, 1, 1] and [0, 2, 0] -> totals [2, 3, 1] over 6
    # steps
    marginal, conditional = ws.histogram_rates(["2 1 1", "0 2", None, ""])
    assert marginal == pytest.approx((4 / 6, 1 / 6))  # P(>=1) = (3+1)/6, P(>=2) = 1/6
    assert conditional == pytest.approx((4 / 6, 1 / 4))  # P(2 | 1) = (1/6) / (4/6)
    assert ws.histogram_rates([]) == ((), ())


def _rq(rows: list[tuple[str, str, int, int, int, str]]) -> pd.DataFrame:
    """(category, prompt, turn, extra tokens, verify steps, histogram) per request."""
    return pd.DataFrame([{"suite": "s", "category": c, "prompt_id": p, "turn": t, "_extra": e, "_verify": v,
                          "spec_histogram": h} for c, p, t, e, v, h in rows])


RQ = [("code", "c1", 1, 12, 10, "8 2"), ("code", "c2", 1, 11, 10, "9 1"),  # accept len 1.15
      ("chat", "h1", 1, 30, 10, "0 0 10"), ("chat", "h2", 1, 26, 10, "1 2 7"),  # 2.8
      ("chat", "h2", 2, 10, 10, "10 0 0")]  # turn 2 of h2 accepts nothing (1.0)


def test_spots_rank_lowest_first_with_pooled_accept_length():
    found = ws.spots(_rq(RQ), "category")
    assert [s.key for s in found] == ["code", "chat"]
    code, chat = found
    assert code.accept_len == pytest.approx(23 / 20) and code.prompts == 2 and code.requests == 2
    assert chat.accept_len == pytest.approx(66 / 30)
    assert code.marginal == pytest.approx((3 / 20,))
    assert code.accept_low is not None and code.accept_low <= code.accept_len <= code.accept_high
    turns = ws.spots(_rq(RQ), "turn")
    assert turns[0].key == "s/h2#2" and turns[0].turn == 2 and turns[0].accept_len == pytest.approx(1.0)
    assert [s.key for s in ws.spots(_rq(RQ), "prompt")][:2] == ["s/c2", "s/c1"]


def test_quantized_prompts_keep_the_steps_noise_in_the_interval():
    # CI saw it: a check run's 3 chat prompts each gave 32 tokens (31 after the first) in 11 verify steps, so
    # the bootstrap over prompts was 0 wide at 31/11 = 2.82, "wholly below" the promotion's 3.05 [2.83-3.29]:
    # a false drift alarm. Each step gave 1 to 4 tokens (h = 2 2 3 4): 33 steps cannot pin 2.82 to +-0.
    from harness.retrain.profile import AcceptStats
    from harness.retrain.watch import _row

    same = [("chat", f"h{i}", 1, 31, 11, "2 2 3 4") for i in range(3)]
    (chat,) = ws.spots(_rq(same), "category")
    assert chat.accept_len == pytest.approx(31 / 11)
    steps = [1] * 2 + [2] * 2 + [3] * 3 + [4] * 4
    rel = 1.96 * pd.Series(steps * 3).std(ddof=1) / 33 ** 0.5 / (31 / 11)  # z x the steps' relative SE
    assert ws.step_half_width(["2 2 3 4"] * 3) == pytest.approx(rel)
    assert chat.accept_low == pytest.approx(31 / 11 * math.exp(-rel))
    assert chat.accept_high == pytest.approx(31 / 11 * math.exp(rel))
    recorded = AcceptStats(requests=12, prompts=3, accept_len=3.05, accept_low=2.83, accept_high=3.29)
    assert _row("chat", recorded, AcceptStats.of(chat)).state == "ok"
    # a real fall still alarms: the same steps' noise around 1.55 lies wholly below 2.83
    fallen = [("chat", f"h{i}", 1, 31, 20, "11 7 2") for i in range(3)]
    (low,) = ws.spots(_rq(fallen), "category")
    assert low.accept_high < 2.83 and _row("chat", recorded, AcceptStats.of(low)).state == "drift"
    # the floor never narrows a prompt interval wider than it (RQ's code prompts differ: 1.2 and 1.1)
    wide = ws.spots(_rq(RQ), "category")[0]
    assert math.log(wide.accept_high / wide.accept_len) > ws.step_half_width(["8 2", "9 1"])


def test_pick_lowest_below_and_by_position():
    rq = _rq(RQ)
    found, ref = ws.spots(rq, "category"), ws.overall(rq)
    assert [s.key for s in ws.pick(found, lowest=1)] == ["code"]
    assert [s.key for s in ws.pick(found, lowest=5)] == ["code", "chat"]
    assert ref is not None and ref.accept_len == pytest.approx(89 / 50)
    assert [s.key for s in ws.pick(found, below=0.9, ref=ref)] == ["code"]  # 1.15 < 0.9 * 1.78 < 2.2
    # by P(>=2): code never accepted two drafts, chat did
    assert [s.key for s in ws.pick(found, lowest=1, position=2)] == ["code"]
    lines = ws.spot_lines(found, ws.pick(found, lowest=1), ref)
    assert lines[1].startswith("*\tcode") and lines[-1].startswith("=\t(all)")
    with pytest.raises(InputError, match="one of category"):
        ws.spots(rq, "bucket")  # type: ignore[arg-type]


def _run_dir(tmp_path: Path) -> Path:
    """A run directory as far as the dataset reads one: plan.resolved.json with its suites."""
    run = tmp_path / "run"
    run.mkdir()
    prompts = [{"id": f"code-{i}", "category": "code", "text": f"Write Python code number {i}."}
               for i in range(4)]
    prompts += [{"id": f"chat-{i}", "category": "chat", "text": f"Chat about topic {i}."} for i in range(8)]
    prompts.append({"id": "mt", "category": "chat",
                    "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "First question?"}],
                    "followups": ["Second question?", "Third question?"]})
    (run / "plan.resolved.json").write_text(json.dumps({"suites": [{"name": "s", "prompts": prompts}]}))
    return run


def _spot(key: str, category: str, prompt: str | None = None, turn: int | None = None) -> ws.Spot:
    level = "category" if prompt is None else "turn" if turn else "prompt"
    return ws.Spot(level, key, category, "s" if prompt else None, prompt, turn, 2, 1, 1.2, None, None, (), ())


def test_build_input_splits_weak_prompts_and_takes_a_share_of_the_rest(tmp_path):
    run = _run_dir(tmp_path)
    m = build_input(run, "v", [_spot("code", "code")], "category", tmp_path / "out", rest_share=0.25,
                    holdout=0.5)
    rows = [json.loads(x) for x in (tmp_path / "out" / REGEN_INPUT).read_text().splitlines()]
    weak = [r for r in m.rows if r.source == "weak"]
    rest = [r for r in m.rows if r.source == "rest"]
    assert len(weak) == 2 and all(r.category == "code" for r in weak)  # half of 4 code prompts
    assert len(rest) == round(9 * 0.25)  # of the 9 other prompts
    held = {(h.prompt_id, h.source) for h in m.held_out}
    assert len([h for h in held if h[1] == "weak"]) == 2 and len(held) == 4 + 9 - 2 - len(rest)
    trained = {r.prompt_id for r in m.rows}
    assert not trained & {h[0] for h in held}  # nothing is both trained on and evaluated
    assert [r["id"] for r in rows] == [r.id for r in m.rows]
    assert rows[0]["conversations"][0]["role"] == "user" \
        and "Python" in rows[0]["conversations"][0]["content"]
    assert read_manifest(tmp_path / "out" / MANIFEST).model_dump() == m.model_dump()
    again = build_input(run, "v", [_spot("code", "code")], "category", tmp_path / "again")
    assert [r.id for r in again.rows] == [r.id for r in m.rows]  # stable choice for the same seed


def test_turn_level_cuts_the_conversation_at_the_weak_turn(tmp_path):
    run = _run_dir(tmp_path)
    spots = [_spot("s/mt#2", "chat", "mt", 2), _spot("s/chat-0", "chat", "chat-0", 1)]
    m = build_input(run, "v", spots, "turn", tmp_path / "out", rest_share=0.0, holdout=0.5)
    rows = {json.loads(x)["id"]: json.loads(x)
            for x in (tmp_path / "out" / REGEN_INPUT).read_text().splitlines()}
    if "s/mt#2" in rows:  # which of the two is held out is the seed's choice
        roles = [t["role"] for t in rows["s/mt#2"]["conversations"]]
        assert roles == ["system", "user", "user"]  # cut after the second user turn
    assert len(m.rows) == 1 and len(m.held_out) == 12  # one of the two trained, everything else held out


def test_duplicates_and_held_out_prompts_never_reach_the_data(tmp_path):
    run = _run_dir(tmp_path)
    log = tmp_path / "traffic.jsonl"
    batch = [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "m", "messages": [{"role": "user", "content": text}]}}
             for i, text in enumerate(["How do I sort a dict?", "how do I   sort a DICT?",
                                       "Chat about topic 0.", "Chat about topic 1."])]
    log.write_text("".join(json.dumps(r) + "\n" for r in batch))
    m = build_input(run, "v", [_spot("code", "code")], "category", tmp_path / "out", rest_share=0.0,
                    traffic=[str(log)])
    traffic = [r for r in m.rows if r.source == "traffic"]
    assert [r.id for r in traffic] == ["traffic:traffic:req-0"]
    assert m.dropped == {"duplicate user turns": 1, "same user turns as a held-out prompt": 2}
    assert content_key([{"role": "user", "content": "A  b"}]) \
        == content_key([{"role": "user", "content": "a b"}])


def test_single_prompt_spot_is_held_out_with_a_note(tmp_path):
    run = _run_dir(tmp_path)
    m = build_input(run, "v", [_spot("s/code-1", "code", "code-1")], "prompt", tmp_path / "out",
                    rest_share=0.0)
    assert m.rows == [] and [h.prompt_id for h in m.held_out if h.source == "weak"] == ["code-1"]
    assert "held out" in m.notes[0]


def test_bad_shares_are_input_errors(tmp_path):
    run = _run_dir(tmp_path)
    with pytest.raises(InputError, match="rest_share"):
        build_input(run, "v", [], "category", tmp_path / "o", rest_share=1.5)
    with pytest.raises(InputError, match="holdout"):
        build_input(run, "v", [], "category", tmp_path / "o", holdout=1.0)
    with pytest.raises(InputError, match="plan.resolved.json"):
        build_input(tmp_path, "v", [], "category", tmp_path / "o")


def test_openai_request_logs_import(tmp_path):
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"custom_id": "a1", "body": {"messages": [
        {"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye?"}]}}) + "\n")
    suite, report = import_suite(batch)
    assert report.format == "openai"
    p = suite.prompts[0]
    assert (p.id, p.messages[0].content, p.messages[1].content, p.followups) \
        == ("a1", "Be terse.", "Hi?", ["Bye?"])
    plain = tmp_path / "requests.jsonl"  # a chat request's body per line: the messages importer
    plain.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Q?"}]}) + "\n")
    assert import_suite(plain)[0].prompts[0].text == "Q?"
