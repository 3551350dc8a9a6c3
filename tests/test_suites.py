"""Suites: shipped data, prompt and suite rules, the question.jsonl importer, writing suites back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.common.errors import InputError
from harness.inputs.config import REPO_ROOT
from harness.inputs.suites import (
    MAX_PROMPT_CHARS,
    Prompt,
    Suite,
    import_question_jsonl,
    load_suite,
    write_suite_yaml,
)

SUITES = sorted((REPO_ROOT / "suites").glob("*.yaml"))
SPEC_BENCH = ["multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag"]


def write_suite(tmp_path: Path, data: Any, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: the huge-prompt test writes MBs
    text = data if isinstance(data, str) else yaml.dump(data, Dumper=dumper, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def suite_error(tmp_path: Path, prompts: list[dict]) -> InputError:
    with pytest.raises(InputError) as info:
        load_suite(write_suite(tmp_path, {"prompts": prompts}))
    return info.value


# ---------------------------------------------------------------- shipped suites


@pytest.mark.parametrize("path", SUITES, ids=[p.name for p in SUITES])
def test_shipped_suites_load_and_round_trip(path: Path, tmp_path):
    suite = load_suite(path)
    assert suite.name == path.stem and suite.description
    assert all(p.size_chars > 20 for p in suite.prompts)
    again = load_suite(write_suite_yaml(suite, tmp_path / path.name))
    assert again == suite


def test_smoke_has_one_prompt_per_kind():
    suite = load_suite(REPO_ROOT / "suites" / "smoke.yaml")
    assert suite.categories == ["code", "reasoning", "chat", "summary", "translation"]


def test_categories_cover_spec_bench():
    suite = load_suite(REPO_ROOT / "suites" / "categories.yaml")
    by_cat = {c: [p for p in suite.prompts if p.category == c] for c in suite.categories}
    assert sorted(by_cat) == sorted(SPEC_BENCH)
    assert all(len(prompts) >= 8 for prompts in by_cat.values())
    for p in by_cat["multi_turn"]:
        roles = [m.role for m in p.messages or []]
        assert "assistant" in roles and roles.count("user") >= 2 and roles[-1] == "user"
    for p in by_cat["rag"] + by_cat["summarization"]:
        assert p.size_chars > 300, p.id  # the passage or the text to summarise is in the prompt
    texts = [p.chat_messages()[-1]["content"] for p in suite.prompts]
    assert len(set(texts)) == len(texts)


def test_long_output_prompts_ask_for_long_answers():
    suite = load_suite(REPO_ROOT / "suites" / "long-output.yaml")
    assert 5 <= len(suite.prompts) <= 8
    assert all(p.max_tokens is not None and 1024 <= p.max_tokens <= 2048 for p in suite.prompts)


# ---------------------------------------------------------------- prompt and suite rules


def test_prompt_forms():
    text = Prompt(id="a", text="hello")
    assert text.chat_messages() == [{"role": "user", "content": "hello"}] and text.category == "general"
    chat = Prompt.model_validate(
        {"id": 7, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
    )
    assert chat.id == "7" and chat.chat_messages()[0] == {"role": "system", "content": "s"}


@pytest.mark.parametrize(
    ("prompt", "field", "words"),
    [
        ({"id": "a"}, "prompts[0]", "exactly one of 'messages'"),
        (
            {"id": "a", "text": "x", "messages": [{"role": "user", "content": "x"}]},
            "prompts[0]",
            "exactly one",
        ),
        ({"id": "a", "messages": []}, "prompts[0].messages", "must not be empty"),
        ({"id": "a", "text": ""}, "prompts[0].text", "must not be empty"),
        (
            {"id": "a", "messages": [{"role": "user", "content": ""}]},
            "prompts[0].messages[0].content",
            "empty",
        ),
        (
            {"id": "a", "messages": [{"role": "user"}]},
            "prompts[0].messages[0].content",
            "missing required field",
        ),
        (
            {"id": "a", "messages": [{"role": "user", "content": "x", "name": "bob"}]},
            "prompts[0].messages[0].name",
            "unknown field 'name'",
        ),
        (
            {"id": "a", "messages": [{"role": "bot", "content": "x"}]},
            "prompts[0].messages[0].role",
            "must be 'system', 'user' or 'assistant', got 'bot'",
        ),
        (
            {
                "id": "a",
                "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            },
            "prompts[0].messages[1].role",
            "last message must be a user turn",
        ),
        (
            {
                "id": "a",
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "system", "content": "y"},
                    {"role": "user", "content": "z"},
                ],
            },
            "prompts[0].messages[1].role",
            "system message can only be the first",
        ),
        ({"id": "a", "text": "x", "max_tokens": 0}, "prompts[0].max_tokens", "greater than 0"),
        (
            {"id": "a", "text": "x", "max_tokens": "many"},
            "prompts[0].max_tokens",
            "expected an integer, got 'many'",
        ),
        ({"id": True, "text": "x"}, "prompts[0].id", "expected a string, got true"),
        ({"id": "", "text": "x"}, "prompts[0].id", "must not be empty"),
        ({"text": "x"}, "prompts[0].id", "missing required field 'id'"),
        ({"id": "a", "text": 5}, "prompts[0].text", "expected a string, got 5"),
    ],
)
def test_prompt_rules(tmp_path, prompt, field, words):
    err = suite_error(tmp_path, [prompt])
    assert err.field == field
    assert words in err.message


def test_multi_turn_with_system_and_assistant_turns_is_fine(tmp_path):
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    suite = load_suite(write_suite(tmp_path, {"prompts": [{"id": "m", "messages": msgs}]}))
    assert suite.prompts[0].chat_messages() == msgs


def test_huge_chat_prompt_is_refused(tmp_path):
    half = "y" * (MAX_PROMPT_CHARS // 2)
    msgs = [
        {"role": "user", "content": half},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": half},
    ]
    err = suite_error(tmp_path, [{"id": "big", "messages": msgs}])
    assert err.field == "prompts[0].messages" and "over the" in err.message


def test_suite_rules(tmp_path):
    assert "no prompts" in suite_error(tmp_path, []).message
    dup = suite_error(tmp_path, [{"id": 1, "text": "a"}, {"id": "2", "text": "b"}, {"id": "1", "text": "c"}])
    assert (dup.field, dup.message) == ("prompts[2].id", "duplicate prompt id '1' (also prompts[0])")
    named = load_suite(
        write_suite(tmp_path, {"name": "given", "prompts": [{"id": 1, "text": "a"}]}, "file.yaml")
    )
    assert named.name == "given"
    assert (
        load_suite(write_suite(tmp_path, {"prompts": [{"id": 1, "text": "a"}]}, "stem.yaml")).name == "stem"
    )
    with pytest.raises(InputError) as info:
        load_suite(write_suite(tmp_path, {"prompts": [{"id": 1, "text": "a"}], "prompt": []}))
    assert info.value.message == "unknown field 'prompt' (did you mean 'prompts'?)"


# ---------------------------------------------------------------- question.jsonl


ROWS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it rhyme."]},
    {"question_id": 82, "category": "math", "turns": ["What is 12 * 13?"], "reference": ["156"]},
    {"question_id": "q-83", "turns": ["Name three rivers in Peru."]},
]


def write_jsonl(tmp_path: Path, lines: list[Any], name: str = "question.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8"
    )
    return path


def test_import_first_turns_by_default(tmp_path):
    suite = import_question_jsonl(write_jsonl(tmp_path, [ROWS[0], "", ROWS[1], "   ", ROWS[2]]))
    assert suite.name == "question"
    assert [(p.id, p.category, p.text) for p in suite.prompts] == [
        ("81", "writing", "Write a haiku about rain."),
        ("82", "math", "What is 12 * 13?"),
        ("q-83", "general", "Name three rivers in Peru."),
    ]


def test_import_all_turns_as_separate_prompts(tmp_path):
    suite = import_question_jsonl(write_jsonl(tmp_path, ROWS), name="mt", all_turns=True)
    assert suite.name == "mt"
    assert [p.id for p in suite.prompts] == ["81", "81-turn2", "82", "q-83"]
    follow = suite.prompts[1]
    assert (follow.text, follow.messages, follow.category) == ("Now make it rhyme.", None, "writing")


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        ('{"question_id": 1, "turns": ["x"]', None, "invalid JSON"),
        ("[1, 2]", None, "expected a JSON object"),
        ({"category": "x", "turns": ["x"]}, "question_id", "missing"),
        ({"question_id": True, "turns": ["x"]}, "question_id", "expected an integer or a string"),
        ({"question_id": 5, "turns": []}, "turns", "non-empty list"),
        ({"question_id": 5, "turns": "just text"}, "turns", "non-empty list"),
        ({"question_id": 5, "turns": ["ok", ""]}, "turns[1]", "non-empty text"),
        ({"question_id": 5, "category": 3, "turns": ["ok"]}, "category", "non-empty string"),
        (
            {"question_id": 81, "turns": ["again"]},
            "question_id",
            "duplicate question_id '81' (first on line 1)",
        ),
    ],
)
def test_import_errors_name_the_row(tmp_path, bad, field, words):
    path = write_jsonl(tmp_path, [ROWS[0], ROWS[1], bad])
    with pytest.raises(InputError) as info:
        import_question_jsonl(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 3, field)
    assert words in err.message and "\n" not in str(err)


def test_import_keeps_unusual_line_separators_inside_rows(tmp_path):
    row = {"question_id": 1, "turns": ["first\u2028second\x0cthird"]}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\r\n", encoding="utf-8")
    assert import_question_jsonl(path).prompts[0].text == "first\u2028second\x0cthird"


def test_import_id_collision_between_turns_and_rows(tmp_path):
    rows = [{"question_id": 7, "turns": ["a", "b"]}, {"question_id": "7-turn2", "turns": ["c"]}]
    with pytest.raises(InputError) as info:
        import_question_jsonl(write_jsonl(tmp_path, rows), all_turns=True)
    assert "duplicate prompt id '7-turn2'" in info.value.message


def test_import_refuses_empty_and_non_utf8_files(tmp_path):
    with pytest.raises(InputError, match="no questions"):
        import_question_jsonl(write_jsonl(tmp_path, [""]))
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(ROWS[0]).encode() + b'\n{"question_id": 2, "turns": ["caf\xe9"]}\n')
    with pytest.raises(InputError) as info:
        import_question_jsonl(path)
    assert info.value.line == 2 and "not valid UTF-8" in info.value.message


def test_imported_suite_is_written_as_readable_yaml(tmp_path):
    rows = [
        {"question_id": 1, "category": "code", "turns": ["Fix this:\n\ndef f(x):\n    return x +\n"]},
        {"question_id": 2, "category": "translation", "turns": ["Traduire : « Bonjour ».  "]},
    ]
    suite = import_question_jsonl(write_jsonl(tmp_path, rows))
    out = write_suite_yaml(suite, tmp_path / "out" / "imported.yaml")
    body = out.read_text(encoding="utf-8")
    assert "text: |" in body and "« Bonjour »" in body  # block scalars, unicode kept as is
    assert load_suite(out) == suite


def test_written_suite_keeps_messages_and_overrides(tmp_path):
    suite = Suite(
        name="w",
        description="d",
        prompts=[
            Prompt(
                id="c",
                category="chat",
                messages=[{"role": "user", "content": "trailing space \nline2"}],
                max_tokens=64,
            ),
            Prompt(id="t", text="plain"),
        ],
    )
    again = load_suite(write_suite_yaml(suite, tmp_path / "w.yaml"))
    assert again == suite
    assert (
        "max_tokens: 64" in (tmp_path / "w.yaml").read_text()
        and "text: null" not in (tmp_path / "w.yaml").read_text()
    )
