# ruff: noqa: F811  (the server/client fixtures come from tests.test_client)
"""Bad usage values and finish reasons from a hostile server: each one is a per-request error with its reason
(never an exception out of stream(), never a record that reads ok), through the real client over HTTP."""

from __future__ import annotations

import json

import pytest

from harness.analysis.records import make_record
from harness.client.stream import ReplayClient
from tests.test_client import REQ, ScriptServer, chat_chunk, client, ev, server, sse  # noqa: F401 (fixtures)


def stream_with(final_usage: object, *, cum: object = None, finish: object = "stop",
                text: str = "t") -> list[bytes]:
    """A chat stream of two content chunks whose final usage chunk carries `final_usage` as completion_tokens
    (and, when `cum` is given, whose content chunks carry it as cumulative usage)."""
    chunks = [ev(chat_chunk("", role=True))]
    for i in range(2):
        c = chat_chunk(f"{text}{i}")
        if cum is not None:
            c["usage"] = {"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 9}
        chunks.append(ev(c))
    last = chat_chunk(None)
    last["choices"][0]["finish_reason"] = finish
    chunks.append(ev(last))
    chunks.append(b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [],
                                           "usage": {"prompt_tokens": 7, "completion_tokens": final_usage}}
                                          ).encode() + b"\n\n")
    chunks.append(ev("[DONE]"))
    return chunks


def record(result) -> object:
    return make_record(run_id="r", variant="v", phase="p", suite="s", prompt_id="p1", category="",
                       concurrency=1, repeat=1, request_id="r1", result=result)


BAD_FINAL = [
    ("abc", "bad usage: completion_tokens 'abc' is not an integer"),
    ("8", "bad usage: completion_tokens '8' is not an integer"),
    ([8], "bad usage: completion_tokens [8] is not an integer"),
    (8.0, "bad usage: completion_tokens 8.0 is not an integer"),
    (1e308, "bad usage: completion_tokens 1e+308 is not an integer"),
    (-3, "bad usage: completion_tokens -3 out of range"),
    (True, "bad usage: completion_tokens True is not an integer"),
    (0, "bad usage: completion_tokens 0 for a stream with content"),
    ({"n": 2}, "bad usage: completion_tokens {'n': 2} is not an integer"),
]


@pytest.mark.parametrize(("value", "reason"), BAD_FINAL, ids=[repr(v) for v, _ in BAD_FINAL])
async def test_bad_final_usage_is_a_request_error(server: ScriptServer, client: ReplayClient, value, reason):
    server.scripts = [sse(stream_with(value))]
    r = await client.stream(REQ)
    assert not r.ok and r.error is not None and r.error.startswith(reason), r.error
    assert r.output_tokens is None and r.prompt_tokens is None
    rec = record(r)  # the record builds, reads error, and carries no count
    assert not rec.ok and rec.error == r.error and rec.output_tokens is None and rec.decode_tok_s is None


@pytest.mark.parametrize("cum", ["abc", "8", [8], 1e308, -1, 2**40])
async def test_bad_cumulative_usage_in_a_chunk_is_a_request_error(server: ScriptServer, client: ReplayClient,
                                                                  cum):
    server.scripts = [sse(stream_with(2, cum=cum))]
    r = await client.stream(REQ)
    assert not r.ok and r.error.startswith("bad usage: completion_tokens"), r.error
    assert all(type(n) is int and 0 <= n < 2**31 for n in r.chunk_tokens)


@pytest.mark.parametrize(("finish", "reason"),
                         [("abort", "server ended the request with finish_reason 'abort'"),
                          ({"type": "abort"}, "bad finish_reason")])
async def test_abort_and_non_string_finish_reasons_are_errors(server: ScriptServer, client: ReplayClient,
                                                              finish, reason):
    server.scripts = [sse(stream_with(2, finish=finish))]
    r = await client.stream(REQ)
    assert not r.ok and r.error.startswith(reason), r.error
    assert record(r).finish_reason in ("abort", "")


async def test_good_usage_still_ok(server: ScriptServer, client: ReplayClient):
    server.scripts = [sse(stream_with(2))]
    r = await client.stream(REQ)
    assert r.ok and r.output_tokens == 2 and r.prompt_tokens == 7 and r.finish_reason == "stop"


async def test_bad_reasoning_details_do_not_raise(server: ScriptServer, client: ReplayClient):
    chunks = stream_with(2)
    chunks[-2] = b"data: " + json.dumps({"choices": [], "usage": {
        "prompt_tokens": 7, "completion_tokens": 2, "completion_tokens_details": "lots"}}).encode() + b"\n\n"
    server.scripts = [sse(chunks)]
    r = await client.stream(REQ)
    assert r.ok and r.reasoning_tokens is None


# ---- end to end: a hostile server behind the runner --------------------------------------------------------

HOSTILE = [("ok1", ""), ("u1", 'USAGE="abc"'), ("u2", 'USAGE="8"'), ("u3", "USAGE=[8]"), ("u4", "USAGE=-8"),
           ("u5", "USAGE=1e308"), ("u6", "USAGE=0"), ("u7", "FINISH=abort"), ("ok2", "")]


async def test_hostile_usage_values_end_as_request_errors_in_a_run(tmp_path):
    import io

    from harness.bench.runner import run_plan
    from harness.cli.progress import consume
    from harness.inputs.config import load_plan
    from tests.faults_helpers import FAULTY_LAUNCHER, read_csv, reap_servers, write_plan

    suite = [{"id": pid, "text": f"{fault or 'fine'} request {pid}"} for pid, fault in HOSTILE] * 1
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=FAULTY_LAUNCHER,
                           sim=False, variants=[{"name": "baseline"}], suite_prompts=suite,
                           run={"concurrency": [3], "max_tokens": 4, "request_timeout_s": 30.0})
    try:
        rc = await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results"),
                           out=io.StringIO())
    finally:
        reap_servers(tmp_path)
    assert rc == 1  # request errors, not an aborted run
    run_dir = next((tmp_path / "results").iterdir())
    rows = {r["prompt_id"]: r for r in read_csv(run_dir / "requests.csv")}
    assert set(rows) == {pid for pid, _ in HOSTILE}  # every prompt recorded: no worker died
    for pid, fault in HOSTILE:
        r = rows[pid]
        assert (r["ok"] == "True") == (not fault), (pid, r["error"])
        if fault:
            assert r["error"].startswith(("bad usage: completion_tokens", "server ended the request")), \
                r["error"]
            assert r["output_tokens"] == ""
    (summary,) = read_csv(run_dir / "summary.csv")
    assert (int(summary["requests"]), int(summary["errors"]), int(summary["output_tokens"])) == (2, 7, 8)


def _with_spec(details: dict) -> list[bytes]:
    chunks = stream_with(2)
    sglext = {"id": "x", "object": "chat.completion.chunk", "choices": [],
              "sglext": {"spec_tokens_details": details}}
    return [*chunks[:-2], ev(sglext), *chunks[-2:]]


@pytest.mark.parametrize(("details", "kept"), [({"spec_verify_ct": "abc", "spec_accept_length": 2.5},
                                                {"spec_accept_length": 2.5}),
                                               ({"spec_verify_ct": [1, "x"], "spec_num_correct_drafts": True},
                                                {})])
async def test_non_numeric_spec_stats_are_dropped_not_divided_by(server: ScriptServer, client: ReplayClient,
                                                                details, kept):
    from harness.engines.sglang.spec import request_spec

    server.scripts = [sse(_with_spec(details))]
    r = await client.stream(REQ)
    assert r.ok and (r.spec or {}) == kept
    # raised TypeError before
    rec = make_record(run_id="r", variant="v", phase="p", suite="s", prompt_id="p1", category="",
                      concurrency=1, repeat=1, request_id="r1", result=r, normalise_spec=request_spec)
    assert rec.ok and rec.spec_verify_ct is None


@pytest.mark.parametrize("bad", [-1, 1e308, 10**13])
async def test_negative_or_huge_spec_stats_are_a_request_error(server: ScriptServer, client: ReplayClient,
                                                                bad):
    server.scripts = [sse(_with_spec({"spec_verify_ct": 4, "spec_num_correct_drafts": bad}))]
    r = await client.stream(REQ)
    assert not r.ok and r.error.startswith("bad spec stats: spec_num_correct_drafts"), r.error


# ---- the SSE buffer: linear, and an event's size capped ---------------------------------------------------


def test_splitter_is_linear_on_a_huge_unterminated_event():
    """100 MB of one event in 64 KiB reads: the old buffer re-copied everything held on every read (16.8 s of
    CPU); counted here as bytes copied, not time: joins happen once, when the event ends."""
    from harness.client.sse import SSESplitter

    s = SSESplitter(max_event_bytes=200 << 20)
    piece = b"x" * (64 << 10)
    s.feed(b"data: ")
    for _ in range(1600):  # 100 MiB
        assert s.feed(piece) == []
    assert len(s._parts) == 1601  # held as reads, never joined while the event is open
    (payload,) = s.feed(b"\n\n")
    assert len(payload) == 1600 * len(piece)


def test_splitter_caps_an_event_and_the_client_says_so():
    from harness.client.sse import EventTooLarge, SSESplitter

    s = SSESplitter(max_event_bytes=1000)
    s.feed(b"data: " + b"y" * 900)
    with pytest.raises(EventTooLarge, match="over 1000 bytes"):
        s.feed(b"y" * 200)
    assert s.feed(b"data: ok\n\n") == [b"ok"]  # the splitter starts afresh


async def test_oversized_event_is_a_request_error(server: ScriptServer, client: ReplayClient, monkeypatch):
    import harness.client.sse as sse_mod

    monkeypatch.setattr(sse_mod.SSESplitter.__init__, "__defaults__", (4096,))
    server.scripts = [sse([ev(chat_chunk("", role=True)), b"data: " + b"z" * 8192])]
    r = await client.stream(REQ)
    assert not r.ok and r.error.startswith("sse event too large: an event over 4096 bytes"), r.error


async def test_a_result_that_cannot_be_built_is_a_request_error_not_an_exception(
        server: ScriptServer, client: ReplayClient, monkeypatch):
    """Whatever slips past the checks above must not escape stream(): the worker would die quietly."""
    from harness.client import collect

    def broken(self, **_kw):
        raise OverflowError("a count no float holds")

    monkeypatch.setattr(collect._Collector, "result", broken)
    server.scripts = [sse(stream_with(2))]
    r = await client.stream(REQ)
    assert not r.ok and r.error == "malformed response: OverflowError: a count no float holds"
