"""Prompt suites: YAML files of chat conversations or plain-text prompts, and the question.jsonl importer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, field_validator, model_validator

from harness.common.errors import InputError
from harness.inputs.expectations import Expect, check_response_format, implied
from harness.inputs.yamlio import FieldProblem, LineMap, StrictModel, load_yaml, read_text, validate

# About 500k tokens: beyond any served context window, so a prompt this big is a mistake, not a test.
MAX_PROMPT_CHARS = 2_000_000


def _id_to_str(value: object) -> object:
    # question.jsonl and hand-written suites often use numeric ids; they are labels either way.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


PromptId = Annotated[str, BeforeValidator(_id_to_str), Field(min_length=1)]


class Message(StrictModel):
    """One chat turn."""

    role: Literal["system", "user", "assistant"] = Field(description="who speaks this turn")
    content: str = Field(min_length=1, description="the text of the turn")


class Prompt(StrictModel):
    """One request of a suite: a chat conversation (`messages`) or plain text (`text`), never both."""

    id: PromptId = Field(description="unique within the suite; names the prompt in records and tables")
    category: str = Field(
        default="general", min_length=1, description="groups prompts in per-category tables"
    )
    messages: list[Message] | None = Field(
        default=None,
        description="chat turns; may be multi-turn with the assistant turns written out; ends with a user "
        "turn",
    )
    text: str | None = Field(
        default=None,
        min_length=1,
        description="plain text: one user message on the chat endpoint, sent raw on the completions endpoint",
    )
    max_tokens: int | None = Field(default=None, gt=0, description="overrides run.max_tokens for this prompt")
    followups: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="live multi-turn: later user turns, each sent as its own request with the conversation "
        "so far, the server's own answers included (MT-bench's second turn)",
    )
    response_format: dict[str, Any] | None = Field(
        default=None, description="OpenAI response_format sent with the request (json_object, json_schema): "
        "structured output; the answer is then expected to satisfy it (harness.inputs.expectations)")
    expect: Expect | None = Field(
        default=None, description="what the first turn's answer must satisfy (json, a JSON schema, a regex): "
        "the lossless audit checks that speculation keeps it wherever the baseline met it")

    @field_validator("response_format")
    @classmethod
    def _format(cls, fmt: dict[str, Any] | None) -> dict[str, Any] | None:
        if fmt is not None and (found := check_response_format(fmt)):
            raise FieldProblem(*found)
        return fmt

    @property
    def expectation(self) -> Expect | None:
        """`expect`, else what `response_format` asks."""
        return self.expect or implied(self.response_format)

    @model_validator(mode="after")
    def _shape(self) -> Prompt:
        if (self.messages is None) == (self.text is None):
            raise FieldProblem("give exactly one of 'messages' (a chat) or 'text' (plain text)")
        if self.messages is not None:
            if not self.messages:
                raise FieldProblem("must not be empty", ("messages",))
            for i, msg in enumerate(self.messages):
                if msg.role == "system" and i != 0:
                    raise FieldProblem(
                        "a system message can only be the first message", ("messages", i, "role")
                    )
            if self.messages[-1].role != "user":
                last = len(self.messages) - 1
                raise FieldProblem(
                    "the last message must be a user turn (the model answers it)", ("messages", last, "role")
                )
        size = self.size_chars
        if size > MAX_PROMPT_CHARS:
            raise FieldProblem(
                f"prompt is {size:,} characters, over the {MAX_PROMPT_CHARS:,}-character limit "
                "(about 500k tokens, beyond any served context window)",
                ("text",) if self.text is not None else ("messages",),
            )
        return self

    @property
    def size_chars(self) -> int:
        if self.text is not None:
            return len(self.text) + sum(map(len, self.followups))
        return sum(len(m.content) for m in self.messages or []) + sum(map(len, self.followups))

    @property
    def turns(self) -> int:
        """Requests this prompt makes: the first turn plus one per follow-up."""
        return 1 + len(self.followups)

    def chat_messages(self) -> list[dict[str, str]]:
        """The prompt as OpenAI chat messages (plain text becomes one user message)."""
        if self.messages is not None:
            return [{"role": m.role, "content": m.content} for m in self.messages]
        return [{"role": "user", "content": self.text or ""}]


class Suite(StrictModel):
    """A named list of prompts."""

    name: str = Field(min_length=1, description="how plans refer to the suite (defaults to the file name)")
    description: str = Field(default="", description="what the suite exercises")
    synthetic: bool = Field(default=False, description="generated prompts (import-suite --synthetic): "
                            "labelled everywhere and warned about by check and run (harness.checks.realism)")
    prompts: list[Prompt] = Field(description="the prompts, replayed in this order")

    @field_validator("prompts")
    @classmethod
    def _not_empty(cls, prompts: list[Prompt]) -> list[Prompt]:
        if not prompts:
            raise ValueError("the suite has no prompts; add at least one")
        return prompts

    @model_validator(mode="after")
    def _unique_ids(self) -> Suite:
        first: dict[str, int] = {}
        for i, prompt in enumerate(self.prompts):
            if prompt.id in first:
                raise FieldProblem(
                    f"duplicate prompt id {prompt.id!r} (also prompts[{first[prompt.id]}])",
                    ("prompts", i, "id"),
                )
            first[prompt.id] = i
        return self

    @property
    def categories(self) -> list[str]:
        """Categories in first-seen order."""
        return list(dict.fromkeys(p.category for p in self.prompts))


def load_suite(path: str | Path) -> Suite:
    """Load and validate a suite YAML file; `name` defaults to the file's stem."""
    data, lines = load_yaml(path)
    if isinstance(data, dict) and "name" not in data:
        data = {"name": Path(path).stem, **data}
    return validate(Suite, data, path, lines)


def import_question_jsonl(path: str | Path, name: str | None = None, *, all_turns: bool = False) -> Suite:
    """Build a suite from an MT-bench / Spec-Bench `question.jsonl` (`question_id`, `category`, `turns`).

    Each row gives one plain-text prompt from its first turn, id = question_id. Later turns are follow-ups
    to the model's own answer ("Now rewrite it as a limerick"), which an offline replay cannot supply;
    with `all_turns=True` they are added as separate single-turn prompts with ids `<question_id>-turn<k>`
    (same text and length profile, but without the earlier context). Other keys (e.g. `reference`) are
    ignored. Errors name the row's line.
    """
    src = str(path)
    text = read_text(path)
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(text.split("\n"), start=1):  # not splitlines(): JSON may hold a raw U+2028
        if not raw.strip():
            continue
        qid, category, turns = _parse_row(raw, src, lineno)
        if qid in first_line:
            raise InputError(
                src, lineno, "question_id", f"duplicate question_id {qid!r} (first on line {first_line[qid]})"
            )
        first_line[qid] = lineno
        for k, turn in enumerate(turns if all_turns else turns[:1], start=1):
            data = {"id": qid if k == 1 else f"{qid}-turn{k}", "category": category, "text": turn}
            prompts.append(validate(Prompt, data, src, LineMap({(): lineno})))
    if not prompts:
        raise InputError(src, None, None, "no questions in the file")
    data = {
        "name": name or Path(path).stem,
        "description": f"imported from {Path(path).name}",
        "prompts": prompts,
    }
    return validate(Suite, data, src, LineMap())  # e.g. a question_id "7-turn2" next to row 7's second turn


def _parse_row(raw: str, src: str, lineno: int) -> tuple[str, str, list[str]]:
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(src, lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(row, dict):
        raise InputError(src, lineno, None, "expected a JSON object with question_id, category and turns")
    qid = row.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, int | str) or qid == "":
        missing = "question_id" not in row
        raise InputError(
            src,
            lineno,
            "question_id",
            "missing" if missing else f"expected an integer or a string, got {qid!r}",
        )
    category = row.get("category", "general")
    if not isinstance(category, str) or not category:
        raise InputError(src, lineno, "category", f"expected a non-empty string, got {category!r}")
    turns = row.get("turns")
    if not isinstance(turns, list) or not turns:
        problem = "missing" if turns is None else f"expected a non-empty list of strings, got {turns!r:.60}"
        raise InputError(src, lineno, "turns", problem)
    for i, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn.strip():
            raise InputError(src, lineno, f"turns[{i}]", f"expected non-empty text, got {turn!r:.60}")
    return str(qid), category, turns


class _SuiteDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block scalars for multi-line text so saved suites stay readable and diffable."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_SuiteDumper.add_representer(str, _str_representer)


def write_suite_yaml(suite: Suite, path: str | Path) -> Path:
    """Write `suite` as YAML that `load_suite` reads back to an equal suite ."""
    target = Path(path)
    data = suite.model_dump(exclude_none=True)
    body = yaml.dump(data, Dumper=_SuiteDumper, sort_keys=False, allow_unicode=True, width=100)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    return target


__all__ = [
    "MAX_PROMPT_CHARS",
    "Message",
    "Prompt",
    "Suite",
    "import_question_jsonl",
    "load_suite",
    "write_suite_yaml",
]
