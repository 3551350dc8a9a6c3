"""Live multi-turn: turn k of a conversation is sent with turns 1..k-1 and the answers the server just gave.

As MT-bench and Spec-Bench replay their second turns: every arm (the baseline and each variant) answers its
own earlier turns, so the comparison stays paired turn by turn, and under greedy decoding a variant whose
outputs match the baseline's sends the same later prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from harness.bench.sizing import level_prompts

if TYPE_CHECKING:
    from harness.client.stream import ReplayRequest
    from harness.inputs.config import Plan
    from harness.inputs.suites import Prompt, Suite


class TurnResult(Protocol):
    """What a turn's answer carries: whether it came (and its text, the next turn's history), and where the
    conversation stood (harness.client.collect.StreamResult; the spec probe's replay.ProbeAnswer)."""

    ok: bool
    text: str
    turn: int
    conversation_id: str
    replay_pass: int


R = TypeVar("R", bound=TurnResult)


def conversation_id(suite: Suite, prompt: Prompt) -> str:
    return f"{suite.name}/{prompt.id}"


def turn_request_id(suite: Suite, prompt: Prompt, turn: int) -> str:
    """Turn 1 keeps the single-turn request id, so single-turn suites read exactly as before."""
    base = conversation_id(suite, prompt)
    return base if turn == 1 else f"{base}/turn{turn}"


def request_ids(suite: Suite, prompt: Prompt) -> list[str]:
    return [turn_request_id(suite, prompt, k) for k in range(1, 1 + prompt.turns)]


def next_turn(req: ReplayRequest, answer: str, followup: str, request_id: str) -> ReplayRequest:
    """The request of the next turn: the previous request's messages, the server's answer, the new user
    turn."""
    history = req.messages if req.messages is not None else [{"role": "user", "content": req.prompt}]
    messages = [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": followup}]
    return dataclasses.replace(req, request_id=request_id, messages=messages, prompt=None)


async def converse(first: ReplayRequest, prompt: Prompt, suite: Suite,
                   send: Callable[[ReplayRequest], Awaitable[R]], stopped: Callable[[], bool] = lambda: False,
                   *, replay_pass: int = 1, suffix: str = "") -> AsyncIterator[tuple[ReplayRequest, R]]:
    """Send `first` (turn 1, built by replay.to_request) and then each follow-up; yields (request, result)
    per turn, the result's `turn`, `replay_pass` and `conversation_id` set. A failed turn ends the
    conversation: the later turns have no answer to follow. `replay_pass`/`suffix`: which pass over the
    suite this replay is (harness.bench.sizing): its request ids end in the suffix."""
    req, answer = first, ""
    followups = list(prompt.followups)
    for turn in range(1, 2 + len(followups)):
        if turn > 1:
            req = next_turn(req, answer, followups[turn - 2], turn_request_id(suite, prompt, turn) + suffix)
        result = await send(req)
        answer = result.text
        result.turn = turn
        result.replay_pass = replay_pass
        result.conversation_id = conversation_id(suite, prompt)
        yield req, result
        if not result.ok or stopped():
            return


def requests_per_pass(plan: Plan) -> int:
    """Requests of one pass over every suite at every load level (each turn is a request; a closed-loop level
    of run.requests_per_slot replays that many x its concurrency: harness.bench.sizing.level_prompts)."""
    per_slot = plan.run.requests_per_slot
    total = 0
    for s in plan.suites:
        turns = sum(p.turns for p in s.prompts)
        total += turns * len(plan.run.request_rate)
        total += sum(sum(p.turns for p in level_prompts(s.prompts, per_slot, int(c))) if per_slot else turns
                     for c in plan.run.concurrency)
    return total
