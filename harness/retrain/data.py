"""Conversation JSONL as SpecForge reads and writes it.

Input rows are SpecForge's `{"id", "conversations": [{"role", "content"}, ...]}` (what
`scripts/prepare_data.py` writes) or ShareGPT's `{"id", "conversations": [{"from", "value"}, ...]}`
(roles human/gpt/chatgpt/bing/bard are mapped the way prepare_data maps them); `messages` is accepted in
place of `conversations`. Output rows are SpecForge's format with `"status": "success"`; failed rows go
to a sibling `<name>_error.jsonl` with `"status": "error"` and the reason, as in
`scripts/regenerate_train_data.py`, so the output file stays trainable as is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.common.errors import InputError

ROLE_MAP = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}
_RESERVED = ("id", "conversations", "messages", "status", "error")


@dataclass(frozen=True)
class Conversation:
    id: str
    messages: tuple[dict[str, Any], ...]  # {"role": user|assistant|system, "content": str | list}
    line: int  # 1-based line in the input file
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level keys, kept in the output row

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")


def error_path(output_path: str | Path) -> Path:
    """Where failed rows go: `x.jsonl` -> `x_error.jsonl` (SpecForge's naming)."""
    p = Path(output_path)
    if p.suffix == ".jsonl":
        return p.with_name(p.stem + "_error.jsonl")
    return p.with_name(p.name + ".errors.jsonl")


def _message(m: object, path: str, line: int, i: int, key: str) -> dict[str, Any]:
    where = f"{key}[{i}]"
    if not isinstance(m, dict):
        raise InputError(path, line, where, f"expected an object, got {type(m).__name__}")
    if "role" in m:
        role, content = m.get("role"), m.get("content")
    elif "from" in m:
        role, content = m.get("from"), m.get("value")
    else:
        raise InputError(path, line, where, "needs 'role'/'content' (SpecForge) or 'from'/'value' (ShareGPT)")
    mapped = ROLE_MAP.get(str(role).lower()) if isinstance(role, str) else None
    if mapped is None:
        raise InputError(path, line, where, f"unknown role {role!r}; one of {', '.join(sorted(ROLE_MAP))}")
    if content is None:
        content = ""
    if not isinstance(content, str | list):
        raise InputError(
            path, line, where, f"content must be a string or a list of parts, got {type(content).__name__}"
        )
    out = {"role": mapped, "content": content}
    if mapped == "assistant" and isinstance(m.get("reasoning_content"), str):
        out["reasoning_content"] = m["reasoning_content"]
    return out


def parse_row(obj: object, path: str, line: int) -> Conversation:
    """One input row; raises InputError located at `path:line`."""
    if not isinstance(obj, dict):
        raise InputError(path, line, None, f"expected a JSON object per line, got {type(obj).__name__}")
    key = "conversations" if "conversations" in obj else "messages" if "messages" in obj else None
    if key is None:
        raise InputError(path, line, None, "no 'conversations' (or 'messages') list")
    turns = obj[key]
    if not isinstance(turns, list):
        raise InputError(path, line, key, f"expected a list, got {type(turns).__name__}")
    raw_id = obj.get("id")
    if raw_id is None:
        conv_id = f"line-{line}"  # stable as long as the file is not edited; SpecForge rows carry ids
    elif isinstance(raw_id, str | int) and not isinstance(raw_id, bool) and str(raw_id).strip():
        conv_id = str(raw_id)
    else:
        raise InputError(path, line, "id", f"must be a non-empty string or an integer, got {raw_id!r}")
    messages = tuple(_message(m, path, line, i, key) for i, m in enumerate(turns))
    extra = {k: v for k, v in obj.items() if k not in _RESERVED}
    return Conversation(conv_id, messages, line, extra)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) for each non-blank line; InputError on bad JSON."""
    name = str(path)
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise InputError(name, None, None, f"cannot read: {exc.strerror}") from None
    with fh:
        for n, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                yield n, json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(name, n, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None


def read_conversations(path: str | Path) -> list[Conversation]:
    """Every row of a SpecForge or ShareGPT JSONL file; ids must be unique (they drive resuming)."""
    seen: dict[str, int] = {}
    out: list[Conversation] = []
    for n, obj in iter_jsonl(path):
        conv = parse_row(obj, str(path), n)
        if conv.id in seen:
            raise InputError(
                str(path),
                n,
                "id",
                f"duplicate id {conv.id!r} (first on line {seen[conv.id]}); "
                "ids must be unique so a resumed run can skip finished rows",
            )
        seen[conv.id] = n
        out.append(conv)
    return out


def regen_problem(conv: Conversation) -> str | None:
    """Why a conversation cannot be replayed (it becomes an error row), or None."""
    if not conv.messages:
        return "empty conversation"
    turns = [m for m in conv.messages if m["role"] != "system"]
    if turns and turns[0]["role"] == "assistant":
        return "Data starts with an assistant message"  # SpecForge's wording
    if not conv.user_turns:
        return "no user turn"
    return None


def success_row(conv: Conversation, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": conv.id, "conversations": messages, **conv.extra, "status": "success"}


def error_row(conv: Conversation, error: str) -> dict[str, Any]:
    return {
        "id": conv.id,
        "conversations": list(conv.messages),
        **conv.extra,
        "status": "error",
        "error": error,
    }


def finished_ids(path: str | Path, *, repair: bool = True) -> set[str]:
    """Ids already written to an output (or error) file. A last line cut short by a kill mid-write is
    removed when `repair` (rows are appended whole and flushed, so only the last one can be partial)."""
    p = Path(path)
    if not p.exists():
        return set()
    data = p.read_bytes()
    ids: set[str] = set()
    good_end = 0
    pos = 0
    line = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        chunk = data[pos:end]
        line += 1
        if chunk.strip():
            try:
                obj = json.loads(chunk)
                if nl < 0:
                    raise ValueError("no newline")  # cut right at the closing brace: still partial
                ids.add(str(obj["id"]))
            except (ValueError, KeyError, TypeError):
                if end < len(data):
                    raise InputError(
                        str(p),
                        line,
                        None,
                        "unreadable row in the middle of the file; fix or remove it before resuming",
                    ) from None
                if not repair:
                    raise InputError(str(p), line, None, "last row is cut short") from None
                break
        good_end = end
        pos = end
    if good_end < len(data):
        with open(p, "r+b") as fh:
            fh.truncate(good_end)
    return ids


def drop_ids(path: str | Path, ids: set[str]) -> int:
    """Rewrite a JSONL file without the rows whose id is in `ids` (atomically); returns how many went."""
    p = Path(path)
    if not p.exists() or not ids:
        return 0
    kept: list[str] = []
    dropped = 0
    with open(p, encoding="utf-8") as fh:
        for text in fh:
            try:
                if str(json.loads(text)["id"]) in ids:
                    dropped += 1
                    continue
            except (ValueError, KeyError, TypeError):
                pass
            kept.append(text if text.endswith("\n") else text + "\n")
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, p)
    return dropped


class RowWriter:
    """Appends one JSON row per line and flushes it, so a killed run loses at most the row being written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = open(self.path, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
