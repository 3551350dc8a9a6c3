"""Conversation JSONL: SpecForge and ShareGPT rows, role mapping, line-aware errors, resume scanning."""

from __future__ import annotations

import json

import pytest

from harness.common.errors import InputError
from harness.retrain.data import (
    RowWriter,
    drop_ids,
    error_path,
    finished_ids,
    read_conversations,
    regen_problem,
    success_row,
)


def write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_specforge_and_sharegpt_rows(tmp_path):
    src = write_lines(
        tmp_path / "in.jsonl",
        [
            {
                "id": "a",
                "conversations": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ],
            },
            "",
            {
                "id": 7,
                "conversations": [
                    {"from": "human", "value": "q1"},
                    {"from": "gpt", "value": "a1"},
                    {"from": "Human", "value": "q2"},
                    {"from": "chatgpt", "value": "a2"},
                    {"from": "bing", "value": "a3"},
                    {"from": "bard", "value": None},
                ],
                "source": "sharegpt",
            },
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}]},
        ],
    )
    a, b, c = read_conversations(src)
    assert (a.id, a.line, [m["role"] for m in a.messages]) == ("a", 1, ["system", "user", "assistant"])
    assert b.id == "7" and b.line == 3 and b.extra == {"source": "sharegpt"}
    assert [m["role"] for m in b.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "assistant",
        "assistant",
    ]
    assert b.messages[-1]["content"] == "" and b.user_turns == 2
    assert c.id == "line-4" and c.messages[0]["content"] == [{"type": "text", "text": "parts"}]
    row = success_row(b, [{"role": "user", "content": "q1"}])
    assert list(row) == ["id", "conversations", "source", "status"] and row["status"] == "success"


@pytest.mark.parametrize(
    "line, field, message",
    [
        ("{not json", None, "not valid JSON"),
        ('["a list"]', None, "expected a JSON object"),
        ('{"id": "x"}', None, "no 'conversations'"),
        ('{"id": "x", "conversations": {"role": "user"}}', "conversations", "expected a list"),
        (
            '{"id": "x", "conversations": [{"role": "robot", "content": "hi"}]}',
            "conversations[0]",
            "unknown role",
        ),
        ('{"id": "x", "conversations": [{"text": "hi"}]}', "conversations[0]", "needs 'role'"),
        (
            '{"id": "x", "conversations": [{"role": "user", "content": 5}]}',
            "conversations[0]",
            "content must be",
        ),
        ('{"id": true, "conversations": []}', "id", "non-empty string"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, line, field, message):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "ok", "conversations": []}\n\n' + line + "\n")
    with pytest.raises(InputError) as err:
        read_conversations(src)
    assert (err.value.path, err.value.line, err.value.field) == (str(src), 3, field)
    assert message in err.value.message


def test_duplicate_ids_point_at_both_lines(tmp_path):
    src = write_lines(
        tmp_path / "in.jsonl", [{"id": "a", "conversations": []}, {"id": "a", "conversations": []}]
    )
    with pytest.raises(InputError, match=r"in.jsonl:2: id: duplicate id 'a' \(first on line 1\)"):
        read_conversations(src)


def test_rows_that_cannot_be_replayed(tmp_path):
    src = write_lines(
        tmp_path / "in.jsonl",
        [
            {"id": "empty", "conversations": []},
            {"id": "sys", "conversations": [{"role": "system", "content": "s"}]},
            {
                "id": "asst",
                "conversations": [
                    {"role": "system", "content": "s"},
                    {"role": "assistant", "content": "x"},
                    {"role": "user", "content": "u"},
                ],
            },
            {"id": "fine", "conversations": [{"role": "user", "content": "u"}]},
        ],
    )
    assert [regen_problem(c) for c in read_conversations(src)] == [
        "empty conversation",
        "no user turn",
        "Data starts with an assistant message",
        None,
    ]


def test_error_file_naming(tmp_path):
    assert error_path(tmp_path / "out.jsonl") == tmp_path / "out_error.jsonl"
    assert error_path(tmp_path / "out.json") == tmp_path / "out.json.errors.jsonl"


def test_finished_ids_repairs_a_row_cut_by_a_kill(tmp_path):
    out = tmp_path / "out.jsonl"
    w = RowWriter(out)
    w.write({"id": "a", "conversations": []})
    w.write({"id": "b", "conversations": []})
    w.close()
    with open(out, "a") as fh:
        fh.write('{"id": "c", "conversa')  # killed in the middle of a write
    assert finished_ids(out) == {"a", "b"}
    assert out.read_text().count("\n") == 2 and out.read_text().endswith("\n")
    with open(out, "a") as fh:
        fh.write('{"id": "d", "conversations": []}')  # complete JSON, but no newline yet: still partial
    assert finished_ids(out) == {"a", "b"} and out.read_text().endswith("[]}\n")
    assert finished_ids(tmp_path / "missing.jsonl") == set()


def test_finished_ids_refuses_damage_in_the_middle(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\ngarbage\n{"id": "b"}\n')
    with pytest.raises(InputError, match="out.jsonl:2: unreadable row in the middle"):
        finished_ids(out)


def test_drop_ids_rewrites_without_them(tmp_path):
    err = write_lines(tmp_path / "e.jsonl", [{"id": "a"}, {"id": "b", "status": "error"}, {"id": "c"}])
    assert drop_ids(err, {"b", "zzz"}) == 1
    assert [json.loads(x)["id"] for x in err.read_text().splitlines()] == ["a", "c"]
