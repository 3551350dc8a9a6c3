"""Suites from the datasets people use: MT-bench / Spec-Bench `question.jsonl`, SPEED-Bench JSONL
(speed_bench.py), ShareGPT-style JSON or JSONL (`conversations` of `from`/`value` or `role`/`content`),
SpecForge training JSONL (the same rows with `role`/`content`, maybe `status: error` rows from regeneration),
OpenAI request logs (a chat request's body per line, or the batch API's `{"custom_id", "body":
{"messages"}}`), and a plain JSONL of prompts.

Every user turn is kept by default as a live multi-turn conversation (`Prompt.followups`): the recorded
assistant answers are dropped, the server under test answers each turn itself. What was imported and what
was dropped, and why, is counted in an `ImportReport`. Errors name the file, the line and the field.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.common.errors import InputError
from harness.inputs import speed_bench
from harness.inputs.suites import Prompt, Suite, _parse_row
from harness.inputs.yamlio import LineMap, read_text, validate

FORMATS = ("auto", "question", "sharegpt", "specforge", "openai", "prompts", "speed-bench")
Turns = Literal["live", "first", "separate"]
USER_ROLES = {"user", "human"}
ASSISTANT_ROLES = {"assistant", "gpt", "chatgpt", "bing", "bard", "model"}


@dataclass
class ImportReport:
    """What an import kept and dropped; `lines()` is what `draftbench import-suite` prints."""

    source: str
    format: str = ""
    rows: int = 0
    conversations: int = 0
    turns: int = 0
    multi_turn: int = 0
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> rows (or turns) left out
    notes: Counter[str] = field(default_factory=Counter)  # changes that kept the row

    def lines(self) -> list[str]:
        out = [f"{self.source}: {self.format}, {self.rows} rows -> {self.conversations} prompts, "
               f"{self.turns} turns ({self.multi_turn} multi-turn, replayed live: later turns follow the "
               "server's answers)"]
        out += [f"  dropped {n}: {why}" for why, n in self.dropped.items()]
        out += [f"  note {n}: {why}" for why, n in self.notes.items()]
        return out


def import_suite(path: str | Path, *, fmt: str = "auto", name: str | None = None, turns: Turns = "live",
                 categories: list[str] | None = None, min_chars: int | None = None,
                 max_chars: int | None = None, sample: int | None = None,
                 seed: int = 1) -> tuple[Suite, ImportReport]:
    """Read `path` in `fmt` (auto: from the file and its first row), filter by category and size (characters
    of all user turns), keep a seeded sample of `sample` prompts (in file order), and build a suite."""
    if fmt not in FORMATS:
        raise InputError(str(path), None, None, f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    src = str(path)
    report = ImportReport(source=Path(path).name)
    rows = list(_rows(read_text(path), src, Path(path).suffix.lower()))
    if not rows:
        raise InputError(src, None, None, "no rows in the file")
    fmt = _detect(rows[0][1], src, rows[0][0]) if fmt == "auto" else fmt
    report.format = fmt
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, row in rows:
        report.rows += 1
        for prompt in _convert(fmt, row, src, lineno, turns, report):
            if prompt.id in seen:
                if fmt == "question":
                    raise InputError(src, lineno, "question_id",
                                     f"duplicate question_id {prompt.id!r} (first on line {seen[prompt.id]})")
                prompt = prompt.model_copy(update={"id": _unique(prompt.id, seen)})
                report.notes["duplicate ids renamed with a -N suffix"] += 1
            seen[prompt.id] = lineno
            prompts.append(prompt)
    prompts = _filter(prompts, report, categories, min_chars, max_chars)
    if sample is not None and sample < len(prompts):
        keep = set(random.Random(seed).sample(range(len(prompts)), sample))
        report.dropped[f"not in the sample of {sample} (seed {seed})"] += len(prompts) - sample
        prompts = [p for i, p in enumerate(prompts) if i in keep]
    if not prompts:
        raise InputError(src, None, None, "no prompts left after the filters")
    report.conversations = len(prompts)
    report.turns = sum(p.turns for p in prompts)
    report.multi_turn = sum(p.turns > 1 for p in prompts)
    data = {"name": name or Path(path).stem, "description": f"imported from {Path(path).name} ({fmt})",
            "prompts": prompts}
    return validate(Suite, data, src, LineMap()), report


def _unique(pid: str, seen: dict[str, int]) -> str:
    n = 2
    while f"{pid}-{n}" in seen:
        n += 1
    return f"{pid}-{n}"


def _filter(prompts: list[Prompt], report: ImportReport, categories: list[str] | None,
            min_chars: int | None, max_chars: int | None) -> list[Prompt]:
    out = []
    for p in prompts:
        if categories is not None and p.category not in categories:
            report.dropped["category not selected"] += 1
        elif min_chars is not None and p.size_chars < min_chars:
            report.dropped[f"shorter than {min_chars} characters"] += 1
        elif max_chars is not None and p.size_chars > max_chars:
            report.dropped[f"longer than {max_chars} characters"] += 1
        else:
            out.append(p)
    return out


# ---------------------------------------------------------------- reading rows with their line numbers


def _rows(text: str, src: str, suffix: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of each JSONL row, or of each element of a top-level JSON array (.json files)."""
    if suffix == ".json" or text.lstrip().startswith("["):
        yield from _array_items(text, src)
        return
    for lineno, raw in enumerate(text.split("\n"), start=1):  # not splitlines(): JSON may hold a raw U+2028
        if raw.strip():
            try:
                yield lineno, json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InputError(src, lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None


def _array_items(text: str, src: str) -> Iterator[tuple[int, Any]]:
    decoder = json.JSONDecoder()
    ws = " \t\r\n"

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    def line(i: int) -> int:
        return text.count("\n", 0, i) + 1

    i = skip(0)
    if text[i:i + 1] != "[":
        raise InputError(src, line(i), None,
                         "expected a JSON array of conversations (or JSONL, one per line)")
    i = skip(i + 1)
    if text[i:i + 1] == "]":
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise InputError(src, exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        yield line(i), value
        i = skip(end)
        if text[i:i + 1] == ",":
            i = skip(i + 1)
        elif text[i:i + 1] == "]":
            if text[skip(i + 1):].strip():
                raise InputError(src, line(skip(i + 1)), None, "invalid JSON: extra data after the array")
            return
        else:
            raise InputError(src, line(i), None, "invalid JSON: expected ',' or ']' after an element")


def _detect(row: object, src: str, lineno: int) -> str:
    if isinstance(row, str):
        return "prompts"
    if isinstance(row, dict):
        if speed_bench.is_speed_bench(row):  # before question.jsonl: its rows have question_id and turns too
            return "speed-bench"
        if "turns" in row or "question_id" in row:
            return "question"
        if isinstance(row.get("body"), dict) and "messages" in row["body"]:
            return "openai"
        if "conversations" in row or "messages" in row:
            return "sharegpt"
        if "prompt" in row or "text" in row:
            return "prompts"
    raise InputError(src, lineno, None, "cannot tell the format from the first row: expected question_id and "
                     "turns (question.jsonl), conversations (ShareGPT / SpecForge), or prompt (a JSONL of "
                     "prompts); give --format")


# ---------------------------------------------------------------- rows -> prompts


def _convert(fmt: str, row: object, src: str, lineno: int, turns: Turns,
             report: ImportReport) -> list[Prompt]:
    if fmt == "question":
        qid, category, texts = _parse_row(json.dumps(row), src, lineno)
        return _prompts(qid, category, None, texts, src, lineno, turns, report)
    if fmt == "prompts":
        return [_plain(row, src, lineno)]
    if fmt == "speed-bench":
        got = speed_bench.row_turns(row, src, lineno)
        if got is None:
            report.dropped[speed_bench.UNRESOLVED] += 1
            return []
        return _prompts(*got[:2], None, got[2], src, lineno, turns, report)
    # the batch API's line
    if fmt == "openai" and isinstance(row, dict) and isinstance(row.get("body"), dict):
        row = {**row["body"], "id": row.get("custom_id", row.get("id"))}
    return _conversation(row, src, lineno, turns, report)


def _prompts(pid: str, category: str, system: str | None, texts: list[str], src: str, lineno: int,
             turns: Turns, report: ImportReport, max_tokens: int | None = None) -> list[Prompt]:
    """One live conversation (or its first turn, or each turn on its own) from its user turns."""
    lines = LineMap({(): lineno})
    first: dict[str, Any] = {"id": pid, "category": category}
    if max_tokens is not None:
        first["max_tokens"] = max_tokens
    if system:
        first["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": texts[0]}]
    else:
        first["text"] = texts[0]
    if turns == "live":
        return [validate(Prompt, {**first, "followups": texts[1:]}, src, lines)]
    if turns == "first":
        if len(texts) > 1:
            report.dropped["later user turns (--turns first)"] += len(texts) - 1
        return [validate(Prompt, first, src, lines)]
    separate = "later turns as single-turn prompts without their context (--turns separate)"
    report.notes[separate] += len(texts) - 1
    return [validate(Prompt, first, src, lines)] + [
        validate(Prompt, {"id": f"{pid}-turn{k}", "category": category, "text": t}, src, lines)
        for k, t in enumerate(texts[1:], start=2)]


def _label(value: object, src: str, lineno: int, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
        raise InputError(src, lineno, what, f"expected an integer or a string, got {value!r:.60}")
    return str(value)


def _plain(row: object, src: str, lineno: int) -> Prompt:
    if isinstance(row, str):
        row = {"prompt": row}
    if not isinstance(row, dict):
        raise InputError(src, lineno, None, "expected a JSON string or an object with 'prompt'")
    key = "prompt" if "prompt" in row else "text"
    text = row.get(key)
    if not isinstance(text, str) or not text.strip():
        raise InputError(src, lineno, key,
                         "missing" if text is None else f"expected non-empty text, got {text!r:.60}")
    data: dict[str, Any] = {"id": _label(row.get("id"), src, lineno, "id") or f"line{lineno}", "text": text}
    if row.get("category") is not None:
        data["category"] = row["category"]
    if row.get("max_tokens") is not None:
        data["max_tokens"] = row["max_tokens"]
    return validate(Prompt, data, src, LineMap({(): lineno}))


def _conversation(row: object, src: str, lineno: int, turns: Turns, report: ImportReport) -> list[Prompt]:
    if not isinstance(row, dict):
        raise InputError(src, lineno, None, "expected a JSON object with 'conversations'")
    if row.get("status") == "error":  # a SpecForge regeneration row that failed
        report.dropped["rows with status 'error' (failed regeneration)"] += 1
        return []
    key = "conversations" if "conversations" in row else "messages"
    conv = row.get(key)
    if not isinstance(conv, list):
        raise InputError(src, lineno, key,
                         "missing" if conv is None else f"expected a list of turns, got {conv!r:.60}")
    system: str | None = None
    users: list[str] = []
    answered = 0
    turn_drops: Counter[str] = Counter()  # counted only if the row itself is kept: a dropped row counts once
    for i, turn in enumerate(conv):
        role, text = _turn(turn, src, lineno, f"{key}[{i}]")
        if role == "system":
            if users or system is not None:
                raise InputError(src, lineno, f"{key}[{i}]", "a system turn can only come first")
            system = text or None
        elif role == "assistant":
            if users:
                answered += 1
            else:
                turn_drops["assistant turns before the first user turn"] += 1
        elif not text.strip():
            turn_drops["empty user turns"] += 1
        elif users and answered < len(users):  # two user turns in a row: one turn of the conversation
            users[-1] += "\n\n" + text
            report.notes["consecutive user turns joined"] += 1
        else:
            users.append(text)
    if not users:
        report.dropped["conversations without a user turn"] += 1
        return []
    report.dropped.update(turn_drops)
    if answered:
        report.notes["recorded assistant answers replaced by the server's own"] += answered
    pid = _label(row.get("id"), src, lineno, "id") or f"line{lineno}"
    category = row.get("category", "general")
    if not isinstance(category, str) or not category:
        raise InputError(src, lineno, "category", f"expected a non-empty string, got {category!r:.60}")
    return _prompts(pid, category, system, users, src, lineno, turns, report)


def _turn(turn: object, src: str, lineno: int, where: str) -> tuple[str, str]:
    """(role, text) of a ShareGPT (`from`/`value`) or OpenAI-style (`role`/`content`) turn."""
    if not isinstance(turn, dict):
        raise InputError(src, lineno, where,
                         f"expected an object with from/value or role/content, got {turn!r:.60}")
    role_key, text_key = ("from", "value") if "from" in turn else ("role", "content")
    role = turn.get(role_key)
    if not isinstance(role, str):
        raise InputError(src, lineno, f"{where}.{role_key}",
                         "missing" if role is None else f"expected a string, got {role!r:.60}")
    role = role.strip().lower()
    if role in USER_ROLES:
        role = "user"
    elif role in ASSISTANT_ROLES:
        role = "assistant"
    elif role != "system":
        raise InputError(src, lineno, f"{where}.{role_key}",
                         f"unknown role {role!r} (user/human, assistant/gpt, system)")
    text = turn.get(text_key)
    if isinstance(text, list):  # OpenAI content parts: the text ones
        text = "".join(p.get("text", "") for p in text
                       if isinstance(p, dict) and p.get("type", "text") == "text")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise InputError(src, lineno, f"{where}.{text_key}", f"expected text, got {text!r:.60}")
    return role, text
