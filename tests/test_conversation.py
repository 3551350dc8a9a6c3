"""Live multi-turn against the stand-in: turn k is sent with turns 1..k-1 and the server's own answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.conversation import converse, request_ids
from harness.bench.replay import send, to_request
from harness.client.collect import StreamResult
from harness.client.stream import ReplayClient
from harness.inputs.config import Plan
from harness.inputs.suites import Prompt, Suite
from harness.sim.sglang import model
from tests.workload_helpers import start_stand_in, stop_stand_in, write_models


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    root = write_models(tmp_path_factory.mktemp("conv"))
    server = start_stand_in(root, "baseline")
    yield server
    stop_stand_in(server)


def _plan(suite: Suite, max_tokens: int) -> Plan:
    return Plan(name="conv", model={"path": "m"}, variants=[{"name": "baseline"}], suites=[suite],
                run={"max_tokens": max_tokens, "temperature": 0.0, "retries": 0})


def _turn_tokens(role: str, text: str) -> int:
    """What one more message adds to the stand-in's chat template (4 framing tokens and the text)."""
    return 4 + len(model.tokenize(f"{role} {text}", 32000))


async def test_turn_two_follows_the_servers_own_answer(stand_in):
    prompt = Prompt(id="q1", category="writing", text="Write a haiku about rain.",
                    followups=["Now make it rhyme.", "And translate it."])
    suite = Suite(name="mt", prompts=[prompt])
    plan = _plan(suite, 24)
    client = ReplayClient(stand_in.url + "/v1", "default")
    try:
        turns = [(req, res) async for req, res in converse(to_request(prompt, suite, plan), prompt, suite,
                                                           lambda r: send(client, r, 0))]
    finally:
        await client.aclose()
    assert [r.request_id for r, _ in turns] == request_ids(suite, prompt) \
        == ["mt/q1", "mt/q1/turn2", "mt/q1/turn3"]
    assert all(res.ok and res.text for _, res in turns)
    assert [(res.turn, res.conversation_id) for _, res in turns] == [(1, "mt/q1"), (2, "mt/q1"), (3, "mt/q1")]
    (r1, a1), (r2, a2), (r3, a3) = turns
    assert r2.messages == [{"role": "user", "content": prompt.text},
                           {"role": "assistant", "content": a1.text},
                           {"role": "user", "content": "Now make it rhyme."}]
    # the server's own count: turn 2's prompt is turn 1's prompt, its answer and the new user turn
    assert a2.prompt_tokens == a1.prompt_tokens + _turn_tokens("assistant", a1.text) + _turn_tokens(
        "user", "Now make it rhyme.")
    assert a3.prompt_tokens == a2.prompt_tokens + _turn_tokens("assistant", a2.text) + _turn_tokens(
        "user", "And translate it.")
    assert r3.messages[:4] == [*r2.messages, {"role": "assistant", "content": a2.text}]


async def test_a_failed_turn_ends_the_conversation():
    prompt = Prompt(id="q", text="a", followups=["b", "c"])
    suite = Suite(name="s", prompts=[prompt])
    sent = []

    async def fail(req):
        sent.append(req.request_id)
        return StreamResult(ok=False, error="http 500", http_status=500, t_send=1.0, t_first=None, t_end=1.5,
                            wall_send=1.7e9)

    got = [r async for r in converse(to_request(prompt, suite, _plan(suite, 4)), prompt, suite, fail)]
    assert sent == ["s/q"] and len(got) == 1  # no later turn without an answer to follow
    assert (got[0][1].turn, got[0][1].conversation_id) == (1, "s/q")


def test_single_turn_prompts_keep_their_request_ids(tmp_path: Path):
    suite = Suite(name="s", prompts=[Prompt(id="a", text="x")])
    assert request_ids(suite, suite.prompts[0]) == ["s/a"]
