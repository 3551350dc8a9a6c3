"""The lossless audit's untimed pass (harness.analysis.lossless says what it decides; docs/metrics.md).

After a baseline's timed phases, on its server still up and before it stops (never inside a phase, so no
timed number changes):
1. the control: each suite prompt once more, non-streaming with logprobs (the top AUDIT_TOP alternatives),
   at a concurrency no phase ran (the smallest from 2 up) and in reverse order: another batch shape, and
   the baseline's answer scored token by token;
2. anchors: where a timed answer of the baseline left the control's answer, a continuation from the
   baseline's own text through the token where they part (chat: the text as a final assistant message with
   continue_final_message; completions: appended to the prompt), so that every position of every timed
   answer is scored in its own context, up to MAX_ANCHORS continuations per answer.
Everything goes to audit.jsonl, one JSON object a line, appended as it comes. Run again after each of the
baseline's measurements (the stopping rule's later looks), it adds only the anchors new answers need.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.logprob_paths import next_anchor, parse_answer
from harness.analysis.lossless import AUDIT_FILE, Audit, answers, read_audit, row_audit
from harness.analysis.summary import read_tables
from harness.bench.replay import to_request
from harness.bench.sampling_client import variant_temperature
from harness.common.events import Alarm

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from harness.analysis.logprob_paths import Tok
    from harness.bench.run_state import RunState
    from harness.client.stream import ReplayClient
    from harness.inputs.config import Plan, Variant
    from harness.inputs.suites import Prompt, Suite

    Answer = tuple[str, list[Tok]]  # an answer's text and its tokens with their logprobs (none without)
    Ask = Callable[..., Awaitable[Answer | None]]

AUDIT_TOP = 5  # alternatives per position: the margin is exact when the variant's token is among them
MAX_ANCHORS = 4  # continuations per timed answer (each passes one more point where the answers part)


def wanted(plan: Plan) -> bool:
    """Asked for, and something to audit: a greedy speculative variant beside its baseline."""
    return bool(plan.run.lossless_audit) and bool(plan.run.concurrency) \
        and any(not v.is_baseline and greedy(plan, v) for v in plan.variants)


def greedy(plan: Plan, variant: Variant) -> bool:
    """Whether a variant replays greedily (its sampling arm's temperature, else run.temperature): only
    greedy answers are audited, a sampled arm's answers differ from its baseline's by design."""
    return variant_temperature(plan, variant) == 0.0


def control_concurrency(levels: list[int]) -> int:
    """The smallest concurrency from 2 up that no phase runs: a batch shape the timed answers never saw."""
    c = 2
    while c in levels:
        c += 1
    return c


class _Writer:
    def __init__(self, path: Path):
        self.path = path

    def write(self, obj: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")


def _path_line(variant: str, suite: str, pid: str, source: str, text: str, toks: list, prefix: int = 0,
               start_token: int = 0) -> dict[str, Any]:
    return {"kind": "path", "variant": variant, "suite": suite, "prompt_id": pid, "source": source,
            "prefix": prefix, "start_token": start_token, "text": text,
            "tokens": [[t.text, t.logprob, [list(a) for a in t.alts]] for t in toks]}


def _baseline_answers(run_dir: Path, variant: str) -> tuple[dict[tuple[str, str], set[str]], bool]:
    """The baseline's timed first-turn answers per (suite, prompt), and whether any holds reasoning text."""
    requests, outputs = read_tables(run_dir, ("requests.csv", "outputs.csv"))
    got: dict[tuple[str, str], set[str]] = {}
    if requests.empty or outputs is None or outputs.empty:
        return got, False
    for conc in sorted(set(requests[requests["variant"] == variant]["concurrency"])):
        a = answers(requests, outputs, variant, int(conc))
        for s, p, text in zip(a["suite"], a["prompt_id"], a["answer"], strict=True):
            got.setdefault((s, p), set()).add(text)
    mine = outputs[outputs["variant"] == variant]
    return got, bool(mine["reasoning"].map(lambda x: isinstance(x, str) and bool(x)).any())


async def audit_baseline(run_dir: Path, plan: Plan, variant: Variant, client: ReplayClient) -> None:
    """The control pass (once per baseline) and the anchors its timed answers still need."""
    audit = read_audit(run_dir) or Audit()
    out = _Writer(run_dir / AUDIT_FILE)
    chat = client.endpoint == "chat"
    logprobs = {"logprobs": True, "top_logprobs": AUDIT_TOP} if chat else {"logprobs": AUDIT_TOP}
    c_a = control_concurrency(list(plan.run.concurrency))
    sem = asyncio.Semaphore(c_a)
    prompts = {(s.name, p.id): (s, p) for s in plan.suites for p in s.prompts}
    for (sname, pid), (_, prompt) in prompts.items():
        if (exp := prompt.expectation) is not None and (sname, pid) not in audit.expects:
            out.write({"kind": "expect", "suite": sname, "prompt_id": pid, "expect": exp.as_dict()})

    async def ask(suite: Suite, item: Prompt, extra: dict[str, Any], **changes: object) -> Answer | None:
        req = to_request(item, suite, plan, request_id=f"audit/{suite.name}/{item.id}")
        if changes:
            req = dataclasses.replace(req, **changes)
        async with sem:
            data = await client.complete_json(req, {**logprobs, **extra})
        return parse_answer(data, chat) if data else None

    name = variant.name
    if name not in audit.passes:
        got = await asyncio.gather(*(ask(s, p, {}) for s, p in reversed(list(prompts.values()))))
        answered = scored = 0
        for (s, p), answer in zip(reversed(list(prompts.values())), got, strict=True):
            if answer is not None:  # without logprobs still a control answer, only not scored
                answered, scored = answered + 1, scored + bool(answer[1])
                line = _path_line(name, s.name, p.id, "free", answer[0], answer[1])
                out.write(line)
                audit.add(line)
        error = None if scored else "the baseline's server answered no request" if not answered \
            else "the baseline's server answered without logprobs"
        head = {"kind": "audit", "variant": name, "concurrency": c_a, "top_logprobs": AUDIT_TOP,
                "margin": float(plan.run.lossless_margin), "endpoint": client.endpoint,
                "prompts": len(prompts), "answered": answered, "scored": scored, "error": error}
        out.write(head)
        audit.add(head)
    timed, reasoning = _baseline_answers(run_dir, name)
    if reasoning:  # a reasoning model's answer is not one assistant text to continue from
        return
    for _ in range(MAX_ANCHORS):
        jobs = []
        for key, texts in timed.items():
            paths = audit.paths.get((name, *key), [])
            for text in texts:
                at = next_anchor(paths, text) if paths else None
                if at is not None and key in prompts:
                    jobs.append((key, text, at))
        if not jobs:
            return
        got = await asyncio.gather(*(_anchor(ask, prompts[key], text, at, plan, chat)
                                     for key, text, at in jobs))
        for (key, text, (chars, tokens)), answer in zip(jobs, got, strict=True):
            if answer is not None and answer[1]:
                line = _path_line(name, key[0], key[1], "anchor", text[:chars] + answer[0], answer[1], chars,
                                  tokens)
                out.write(line)
                audit.add(line)
            if not (answer and answer[1]) \
                    or next_anchor(audit.paths.get((name, *key), []), text) == (chars, tokens):
                # no answer, or one that went no further: this text stays partly scored
                timed[key].discard(text)


async def _anchor(ask: Ask, where: tuple[Suite, Prompt], text: str, at: tuple[int, int], plan: Plan,
                  chat: bool) -> Answer | None:
    suite, prompt = where
    chars, tokens = at
    prefix = text[:chars]
    left = max(1, int(prompt.max_tokens or plan.run.max_tokens) - tokens)
    if chat:
        messages = [*prompt.chat_messages(), {"role": "assistant", "content": prefix}]
        return await ask(suite, prompt, {"continue_final_message": True, "add_generation_prompt": False},
                         messages=messages, prompt=None, max_tokens=left)
    from harness.client.stream import prompt_text  # the openai SDK's import: only where a request goes out

    body_prompt = (prompt.text if prompt.text is not None else prompt_text(prompt.chat_messages())) + prefix
    return await ask(suite, prompt, {}, messages=None, prompt=body_prompt, max_tokens=left)


def verdict_alarms(run_dir: Path, plan: Plan, variant: Variant, baseline: str) -> list[Alarm]:
    """A finished variant's `lossless-suspect` alarm (one per variant, every suspect concurrency in it)."""
    audit = read_audit(run_dir)
    if audit is None or baseline not in audit.passes:
        return []
    requests, outputs = read_tables(run_dir, ("requests.csv", "outputs.csv"))
    found = []
    for conc in plan.run.concurrency:
        got = row_audit(requests, outputs, audit, baseline, variant.name, int(conc))
        if got.get("lossless_verdict") == "suspect":
            found.append(f"c{conc}: {got['lossless_detail']}")
    if not found:
        return []
    return [Alarm(variant.name, "error", "lossless-suspect",
                  "greedy output departs from the baseline's where the baseline is not near a tie: "
                  + " || ".join(found) + ". A verify path that accepts wrong draft tokens does this "
                  "(docs/metrics.md, lossless audit)")]


def baseline_for(plan: Plan, variant: Variant) -> str | None:
    """The baseline a variant is compared with: its engine's at its sampling arm (Plan.baseline_of)."""
    try:
        return plan.baseline_of(variant).name
    except StopIteration:
        return None


async def after_measure(run: RunState, variant: Variant, client: ReplayClient) -> None:
    """The runner's hook after a variant's phases (harness.bench.runner): a baseline's audit pass on its
    server, a speculative variant's verdict as a live alarm. Never fails the variant: a fault is a warning."""
    meta = run.metas.get(variant.name)
    if not wanted(run.plan) or not greedy(run.plan, variant) \
            or (meta is not None and meta.forced_acceptance is not None):
        return  # a sampled arm's answers differ by design; a forced copy's are not the model's
    try:
        if variant.is_baseline:
            run.phase_tag[variant.name] = "audit"  # its log lines belong to no phase
            try:
                await audit_baseline(run.run_dir, run.plan, variant, client)
            finally:
                run.phase_tag[variant.name] = None
        elif (base := baseline_for(run.plan, variant)) is not None:
            for alarm in verdict_alarms(run.run_dir, run.plan, variant, base):
                for out in run.alarms.raise_once(alarm):
                    run.emit(out)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        run.emit(Alarm(variant.name, "warning", "audit-failed", f"the lossless audit stopped: {exc}"))
