"""Requests against the context windows, per suite: the target's (SGLang refuses a longer request) and each
drafter's trained `max_position_embeddings` (acceptance decays past it, sglang #6783). Live multi-turn
conversations grow: turn k carries every earlier user turn and answer, so each turn is counted on its own."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from harness.checks.checkpoint import text_config
from harness.common.findings import PLAN_WIDE, Finding, error, warning

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.inputs.suites import Prompt, Suite

CHARS_PER_TOKEN = 4  # rough English average; the check only needs the order of magnitude
TEMPLATE_TOKENS = 16  # chat-template overhead per message pair


def turn_tokens(prompt: Prompt, max_tokens: int) -> list[int]:
    """Estimated tokens at the end of each turn: its prompt (earlier turns and answers included) and its
    output."""
    cap = int(prompt.max_tokens or max_tokens)
    first = sum(len(m.content) for m in prompt.messages) if prompt.messages else len(prompt.text or "")
    out, chars = [], first
    for k in range(prompt.turns):
        if k:
            chars += len(prompt.followups[k - 1])
        out.append(math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS * (k + 1) + cap * (k + 1))
    return out


def target_context(plan: Plan, target_cfg: dict[str, Any] | None) -> int | None:
    """--context-length from the model's extra_args, else the checkpoint's max_position_embeddings."""
    args = [str(a) for a in plan.model.extra_args]
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--context-length=") else (
            args[i + 1] if a == "--context-length" and i + 1 < len(args) else None)
        if value is not None and value.isdigit():
            return int(value)
    mpe = text_config(target_cfg).get("max_position_embeddings") if target_cfg else None
    return int(mpe) if isinstance(mpe, int) else None


def _over(plan: Plan, limit: int) -> list[tuple[Suite, int, int, str]]:
    """Per suite: (suite, requests over `limit`, all requests, the longest as 'suite/id turn k ~N tokens')."""
    rows = []
    for suite in plan.suites:
        total = over = 0
        worst, note = 0, ""
        for p in suite.prompts:
            for k, n in enumerate(turn_tokens(p, plan.run.max_tokens), start=1):
                total += 1
                if n > limit:
                    over += 1
                if n > worst:
                    turn = f" turn {k}" if p.turns > 1 else ""
                    worst, note = n, f"{suite.name}/{p.id}{turn} ~{n} tokens"
        if over:
            rows.append((suite, over, total, note))
    return rows


def target_findings(plan: Plan, target_cfg: dict[str, Any] | None) -> list[Finding]:
    limit = target_context(plan, target_cfg)
    if not limit:
        return []
    return [error(PLAN_WIDE, "context-target",
                  f"suite {suite.name}: {over} of {total} requests reach past the target's context of "
                  f"{limit} tokens (longest: {note})",
                  "SGLang refuses a request longer than its context length: those rows would be errors",
                  "drop long prompts (import-suite --max-chars), lower max_tokens, or serve a longer context")
            for suite, over, total, note in _over(plan, limit)]


def drafter_findings(variant: str, drafter_cfg: dict[str, Any] | None, plan: Plan) -> list[Finding]:
    mpe = (drafter_cfg or {}).get("max_position_embeddings")
    if not isinstance(mpe, int) or mpe <= 0:
        return []
    return [warning(variant, "max-position",
                    f"suite {suite.name}: {over} of {total} requests go past the drafter's "
                    f"max_position_embeddings {mpe} (longest: {note})",
                    "acceptance drops once a sequence runs past the drafter's trained context (sglang #6783)",
                    "use a drafter trained on longer sequences, or shorten the prompts / max_tokens")
            for suite, over, total, note in _over(plan, mpe)]
