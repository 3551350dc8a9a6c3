"""Reasoning models (Kimi-K2.5 thinks before it answers): the reasoning text counts in the output hash, and
TTFT is kept twice: to the first token of any kind and to the first answer token."""

from __future__ import annotations

import orjson

from harness.analysis.records import make_record, output_sha
from harness.client.collect import _Collector


def _chunk(reasoning: str | None = None, content: str | None = None, cum: int | None = None) -> bytes:
    delta = {k: v for k, v in (("reasoning_content", reasoning), ("content", content)) if v is not None}
    obj: dict = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 9, "completion_tokens": cum}
    return orjson.dumps(obj)


def _stream(events: list[tuple[float, bytes]]):
    col = _Collector(chat=True)
    for t, payload in events:
        col.add_all([payload], t)
    return col.result(t_send=10.0, wall_send=0.0, status=200)


def _reasoning_run(answer: str = "Paris.", thought: str = "The capital of France") -> object:
    usage = orjson.dumps({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7,
                                                   "completion_tokens_details": {"reasoning_tokens": 4}}})
    return _stream([(10.1, _chunk(reasoning=thought[:7], cum=2)),
                    (10.2, _chunk(reasoning=thought[7:], cum=4)),
                    (10.5, _chunk(content=answer[:3], cum=6)), (10.6, _chunk(content=answer[3:], cum=7)),
                    (10.7, usage), (10.7, b"[DONE]")])


def _record(result: object):
    return make_record(run_id="r", variant="v", phase="s@c1#r1", suite="s", prompt_id="p", category="c",
                       concurrency=1, repeat=1, request_id="s/p", result=result)


def test_ttft_of_any_token_and_of_the_first_answer_token():
    res = _reasoning_run()
    assert res.ok and res.text == "Paris." and res.reasoning == "The capital of France"
    rec = _record(res)
    assert round(rec.ttft_ms, 6) == 100.0  # the first reasoning token is the first token users see stream
    assert round(rec.ttft_answer_ms, 6) == 500.0
    assert (rec.output_tokens, rec.reasoning_tokens, rec.reasoning_chars) == (7, 4,
                                                                             len("The capital of France"))


def test_the_output_hash_covers_the_reasoning():
    same_answer_other_thought = _record(_reasoning_run(thought="France's capital city"))
    rec = _record(_reasoning_run())
    assert rec.text_sha != same_answer_other_thought.text_sha  # thinking differently is a different output
    assert rec.text_sha == output_sha("Paris.", "The capital of France")
    plain = _stream([(10.2, _chunk(content="Paris.", cum=2)),
                     (10.3, orjson.dumps({"choices": [],
                                          "usage": {"prompt_tokens": 9, "completion_tokens": 2}})),
                     (10.3, b"[DONE]")])
    prec = _record(plain)
    # no reasoning: as before
    assert prec.text_sha == output_sha("Paris.") and prec.ttft_answer_ms == prec.ttft_ms
    assert prec.reasoning_tokens is None and prec.reasoning_chars == 0
