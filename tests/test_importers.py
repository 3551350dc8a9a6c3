"""Importers: hand-made files of each format, the turns kept live by default, filters, sampling, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.common.errors import InputError
from harness.inputs.importers import import_suite
from harness.inputs.suites import load_suite


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it rhyme."]},
    {"question_id": 82, "category": "math", "turns": ["What is 12 * 13?"], "reference": ["156"]},
    {"question_id": 83, "category": "coding", "turns": ["Reverse a list in Python.", "Now in C."]},
]


def test_question_jsonl_keeps_every_turn_live_by_default(tmp_path):
    suite, report = import_suite(_jsonl(tmp_path / "question.jsonl", QUESTIONS))
    assert [(p.id, p.text, p.followups) for p in suite.prompts] == [
        ("81", "Write a haiku about rain.", ["Now make it rhyme."]),
        ("82", "What is 12 * 13?", []),
        ("83", "Reverse a list in Python.", ["Now in C."]),
    ]
    assert (report.format, report.rows, report.conversations, report.turns, report.multi_turn) == (
        "question", 3, 3, 5, 2)
    assert not report.dropped


def test_first_turns_only_says_what_it_dropped(tmp_path):
    suite, report = import_suite(_jsonl(tmp_path / "q.jsonl", QUESTIONS), turns="first")
    assert all(not p.followups for p in suite.prompts)
    assert report.dropped == {"later user turns (--turns first)": 2}
    assert "dropped 2: later user turns" in "\n".join(report.lines())


def test_separate_turns_as_before(tmp_path):
    suite, _ = import_suite(_jsonl(tmp_path / "q.jsonl", QUESTIONS), turns="separate")
    assert [p.id for p in suite.prompts] == ["81", "81-turn2", "82", "83", "83-turn2"]


def test_sharegpt_json_array_from_value(tmp_path):
    rows = [
        {"id": "c1", "conversations": [{"from": "system", "value": "Be brief."},
                                       {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"},
                                       {"from": "human", "value": "Tell a joke"},
                                       {"from": "gpt", "value": "..."}]},
        {"id": "c1", "conversations": [{"from": "gpt", "value": "orphan"}, {"from": "human", "value": "Q?"}]},
        {"id": "c3", "conversations": [{"from": "gpt", "value": "only an answer"}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    suite, report = import_suite(path)
    assert report.format == "sharegpt"
    first, second = suite.prompts
    assert first.messages is not None and [m.role for m in first.messages] == ["system", "user"]
    assert first.followups == ["Tell a joke"]
    assert (second.id, second.text) == ("c1-2", "Q?")  # duplicate ids are common in ShareGPT dumps
    assert report.dropped == {"assistant turns before the first user turn": 1,  # c3's counts as its row only
                              "conversations without a user turn": 1}
    assert report.notes["recorded assistant answers replaced by the server's own"] == 2


def test_sharegpt_jsonl_role_content_and_specforge_rows(tmp_path):
    rows = [
        {"id": 1, "conversations": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"},
                                    {"role": "user", "content": [{"type": "text", "text": "C"}]}]},
        {"id": 2, "conversations": [{"role": "user", "content": "x"}], "status": "error", "error": "timeout"},
        {"id": 3, "messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
    ]
    suite, report = import_suite(_jsonl(tmp_path / "train.jsonl", rows), fmt="specforge")
    assert [(p.id, p.text, p.followups) for p in suite.prompts] == [("1", "A", ["C"]),
                                                                    ("3", "one\n\ntwo", [])]
    assert report.dropped == {"rows with status 'error' (failed regeneration)": 1}
    assert report.notes["consecutive user turns joined"] == 1


def test_plain_jsonl_of_prompts(tmp_path):
    rows = ["Summarise the plot of Hamlet.", {"prompt": "Explain TCP.", "id": "tcp", "category": "tech",
                                              "max_tokens": 64}, {"text": "Plain text key"}]
    suite, report = import_suite(_jsonl(tmp_path / "prompts.jsonl", rows))
    assert report.format == "prompts"
    assert [(p.id, p.category, p.max_tokens) for p in suite.prompts] == [
        ("line1", "general", None), ("tcp", "tech", 64), ("line3", "general", None)]


def test_categories_length_and_a_seeded_sample(tmp_path):
    rows = [{"question_id": i, "category": "a" if i % 2 else "b", "turns": ["x" * (10 + i)]}
            for i in range(40)]
    path = _jsonl(tmp_path / "q.jsonl", rows)
    suite, report = import_suite(path, categories=["a"], max_chars=40)
    assert {p.category for p in suite.prompts} == {"a"} and all(p.size_chars <= 40 for p in suite.prompts)
    assert report.dropped == {"category not selected": 20, "longer than 40 characters": 5}
    one, _ = import_suite(path, sample=7, seed=3)
    again, _ = import_suite(path, sample=7, seed=3)
    other, _ = import_suite(path, sample=7, seed=4)
    ids = [p.id for p in one.prompts]
    assert ids == [p.id for p in again.prompts] and ids != [p.id for p in other.prompts]
    assert ids == sorted(ids, key=int)  # file order kept


def test_json_array_errors_name_the_element_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"conversations": []},\n  {"conversations": 3}\n]\n', encoding="utf-8")
    with pytest.raises(InputError) as info:
        import_suite(path)
    assert (info.value.line, info.value.field) == (3, "conversations")
    path.write_text('[\n  {"conversations": []}\n  {"x": 1}\n]\n', encoding="utf-8")
    with pytest.raises(InputError, match="expected ',' or ']'"):
        import_suite(path)


def test_unknown_first_row_asks_for_the_format(tmp_path):
    with pytest.raises(InputError, match="give --format") as info:
        import_suite(_jsonl(tmp_path / "x.jsonl", [{"foo": 1}]))
    assert info.value.line == 1


def test_cli_prints_what_it_imported_and_dropped(tmp_path, capsys):
    out = tmp_path / "mt.yaml"
    rc = main(["import-suite", str(_jsonl(tmp_path / "question.jsonl", QUESTIONS)), "--out", str(out),
               "--categories", "writing,math"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "question, 3 rows -> 2 prompts, 3 turns (1 multi-turn" in err
    assert "dropped 1: category not selected" in err
    suite = load_suite(out)  # the written suite reads back with its follow-ups
    assert suite.prompts[0].followups == ["Now make it rhyme."]


def test_the_suite_is_named_by_out_not_by_the_input_file(tmp_path, capsys):
    """Two imports of files both called question.jsonl make two suites a plan can list side by side."""
    import yaml

    from harness.inputs.config import load_plan

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    for d, rows in (("a", QUESTIONS[:1]), ("b", QUESTIONS[1:])):
        assert main(["import-suite", str(_jsonl(tmp_path / d / "question.jsonl", rows)), "--out",
                     str(tmp_path / f"mt-{d}.yaml")]) == 0
    assert [load_suite(tmp_path / f"mt-{d}.yaml").name for d in "ab"] == ["mt-a", "mt-b"]
    assert main(["import-suite", str(tmp_path / "a" / "question.jsonl"), "--out", str(tmp_path / "c.yaml"),
                 "--name", "chosen"]) == 0
    assert load_suite(tmp_path / "c.yaml").name == "chosen"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "p", "model": {"path": "/m"}, "variants": [{"name": "baseline"}],
                                    "suites": [str(tmp_path / "mt-a.yaml"), str(tmp_path / "mt-b.yaml")]}))
    assert [s.name for s in load_plan(plan).suites] == ["mt-a", "mt-b"]


def test_out_onto_an_existing_file_refuses_unless_forced(tmp_path, capsys):
    src = _jsonl(tmp_path / "question.jsonl", QUESTIONS)
    out = tmp_path / "mine.yaml"
    out.write_text("keep me\n")
    assert main(["import-suite", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {out}: --out: exists; give --force to overwrite it, or another --out"
    assert out.read_text() == "keep me\n"
    assert main(["import-suite", str(src), "--out", str(out), "--force"]) == 0
    assert load_suite(out).name == "mine"


def test_a_dropped_row_is_reported_once_with_its_reason(tmp_path, capsys):
    rows = [
        {"id": "ok", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"id": "empty", "conversations": [{"from": "human", "value": "  "}]},  # no user turn left: one row
        {"id": "late", "conversations": [{"from": "gpt", "value": "first"}, {"from": "human", "value": "q"}]},
    ]
    suite, report = import_suite(_jsonl(tmp_path / "sg.jsonl", rows))
    assert [p.id for p in suite.prompts] == ["ok", "late"]
    assert dict(report.dropped) == {"conversations without a user turn": 1,
                                    "assistant turns before the first user turn": 1}
    assert main(["import-suite", str(tmp_path / "sg.jsonl"), "--out", str(tmp_path / "sg.yaml")]) == 0
    err = capsys.readouterr().err
    assert err.count("  dropped ") == 2 and "empty user turns" not in err
