"""Suites for the context-length axis: SPEED-Bench's JSONL as an importer (its categories, its placeholder
rows dropped), and synthetic N-token prompts counted with the target's own tokenizer, labelled synthetic."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.common.errors import InputError
from harness.inputs.config import REPO_ROOT
from harness.inputs.importers import import_suite
from harness.inputs.speed_bench import PLACEHOLDER
from harness.inputs.suites import load_suite

# rows as SPEED-Bench's configs hold them (nvidia/SPEED-Bench: question_id, category, sub_category, turns,
# source, src_id, difficulty, multiturn), written as JSON Lines
SPEED_ROWS = [
    {"question_id": "qual-coding-0001", "category": "coding", "sub_category": "python", "turns":
     ["Write a function that merges two sorted lists."], "source": "speed-bench", "src_id": "c1",
     "difficulty": "easy", "multiturn": False},
    {"question_id": "qual-writing-0007", "category": "writing", "sub_category": "story", "turns":
     ["Write the opening of a mystery story.", "Now continue it from the detective's view."],
     "source": "speed-bench", "src_id": "w7", "difficulty": "medium", "multiturn": True},
    {"question_id": "qual-summarization-0003", "category": "summarization", "sub_category": "news", "turns":
     [f"{PLACEHOLDER}\n\nSummarize this article:\n{{article}}"], "source": "abisee/cnn_dailymail",
     "src_id": "a3f", "difficulty": "medium", "multiturn": False},
    {"question_id": "tp1k-low-0001", "category": "low_entropy", "sub_category": "textsort", "turns":
     ["Sort these book sections into order: ..."], "source": "AdaLEval/textsort", "src_id": "ts_1",
     "difficulty": "hard", "multiturn": False},
]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_speed_bench_rows_are_recognised_and_keep_their_categories(tmp_path):
    suite, report = import_suite(_jsonl(tmp_path / "qualitative.jsonl", SPEED_ROWS))
    assert report.format == "speed-bench"
    assert [(p.id, p.category) for p in suite.prompts] == [
        ("qual-coding-0001", "coding"), ("qual-writing-0007", "writing"), ("tp1k-low-0001", "low_entropy")]
    assert suite.prompts[1].followups == ["Now continue it from the detective's view."]  # live multi-turn
    # a row whose text is still SPEED-Bench's placeholder is never replayed; the report says why
    assert [why for why in report.dropped if "placeholders" in why] and sum(report.dropped.values()) == 1
    assert all(PLACEHOLDER not in (p.text or "") for p in suite.prompts)
    only, _ = import_suite(tmp_path / "qualitative.jsonl", fmt="speed-bench", categories=["coding"])
    assert [p.id for p in only.prompts] == ["qual-coding-0001"]


def test_speed_bench_errors_name_the_line_and_field(tmp_path):
    bad = [SPEED_ROWS[0], {**SPEED_ROWS[1], "turns": ["fine", ""]}]
    with pytest.raises(InputError) as exc:
        import_suite(_jsonl(tmp_path / "bad.jsonl", bad))
    assert exc.value.line == 2 and exc.value.field == "turns[1]"


def test_import_suite_cli_takes_speed_bench(tmp_path, capsys):
    src = _jsonl(tmp_path / "qualitative.jsonl", SPEED_ROWS)
    assert main(["import-suite", str(src), "--out", str(tmp_path / "speed.yaml")]) == 0
    err = capsys.readouterr().err
    assert "speed-bench, 4 rows -> 3 prompts" in err and "prepare_data.py" in err
    assert load_suite(tmp_path / "speed.yaml").categories == ["coding", "writing", "low_entropy"]


# --- synthetic prompts with the target's tokenizer ----------------------------------------------------------

def _tokenizer(tmp_path: Path) -> Path:
    """A small byte-level BPE tokenizer.json, trained here: the same file format as a model's."""
    tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers (the [synthetic] extra)")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [("The careful council reviews the annual budget of the northern harbour, while a local team "
               "records the signal. ") * 20, "Summarize the document above in five bullet points. " * 5]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "model" / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def test_synthetic_prompts_are_n_tokens_by_the_targets_tokenizer_and_labelled(tmp_path, capsys):
    from tokenizers import Tokenizer

    path = _tokenizer(tmp_path)
    out = tmp_path / "long.yaml"
    assert main(["import-suite", "--synthetic", "--tokens", "300,1200", "--tokenizer", str(path.parent),
                 "--count", "2", "--out", str(out)]) == 0
    assert "SYNTHETIC: 4 prompts" in capsys.readouterr().err
    suite = load_suite(out)
    assert suite.synthetic and suite.description.startswith("SYNTHETIC")
    assert [(p.id, p.category) for p in suite.prompts] == [
        ("synthetic-300-1", "synthetic-300"), ("synthetic-300-2", "synthetic-300"),
        ("synthetic-1200-1", "synthetic-1200"), ("synthetic-1200-2", "synthetic-1200")]
    tok = Tokenizer.from_file(str(path))
    for p in suite.prompts:
        n = int(p.id.split("-")[1])
        text = p.messages[-1].content
        assert abs(len(tok.encode(text, add_special_tokens=False).ids) - n) <= 1, p.id
        assert text.rstrip().endswith((".", "?", "list.", "points.")) and "document above" in text
    assert len({p.messages[-1].content for p in suite.prompts}) == 4  # seeded, and no two alike


def test_synthetic_prompts_from_a_source_text(tmp_path):
    from harness.inputs.synthetic import synthetic_suite

    path = _tokenizer(tmp_path)
    prose = tmp_path / "book.txt"
    prose.write_text("It was a bright cold day in April, and the clocks were striking thirteen. " * 40)
    suite = synthetic_suite([200], path, count=1, source=prose)
    assert "bright cold day" in suite.prompts[0].messages[-1].content and "book.txt" in suite.description


def test_synthetic_needs_the_tokenizers_package_and_a_tokenizer_file(tmp_path, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_tokenizers(name, *args, **kwargs):
        if name == "tokenizers" or name.startswith("tokenizers."):
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    rc = main(["import-suite", "--synthetic", "--tokens", "4096", "--tokenizer", str(tmp_path),
               "--out", str(tmp_path / "x.yaml")])
    assert rc == 2 and "pip install 'draftbench[synthetic]'" in capsys.readouterr().err
    monkeypatch.setattr(builtins, "__import__", real_import)
    pytest.importorskip("tokenizers")
    rc = main(["import-suite", "--synthetic", "--tokens", "4096", "--tokenizer", str(tmp_path),
               "--out", str(tmp_path / "x.yaml")])
    assert rc == 2 and "no tokenizer.json there" in capsys.readouterr().err
    rc = main(["import-suite", "--synthetic", "--tokenizer", str(tmp_path), "--out",
               str(tmp_path / "x.yaml")])
    assert rc == 2 and "--tokens" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_the_stand_ins_target_counts_tokens_as_the_stand_in_does(tmp_path):
    """The stand-in's target model carries a tokenizer.json of the stand-in's own tokenizer, so a synthetic
    prompt of N tokens by it is N tokens at the stand-in's server (its usage.prompt_tokens)."""
    Tokenizer = pytest.importorskip("tokenizers", reason="the [synthetic] extra").Tokenizer

    from harness.inputs.synthetic import synthetic_suite
    from harness.sim.sglang.fixtures import write_target_model
    from harness.sim.sglang.model import chat_prompt_ids, tokenize

    target = write_target_model(tmp_path / "target", vocab_size=1024)
    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    for text in ("Hello, world!\n\nThe  quick\tbrown fox's internationalization (2024) café naïve",
                 "a\r\nb  \n\n  c", "x" * 20, "  leading and trailing  ", "under_score_word foo-bar 3.14",
                 (REPO_ROOT / "suites" / "smoke.yaml").read_text(encoding="utf-8")):
        assert len(tok.encode(text, add_special_tokens=False).ids) == len(tokenize(text, 1024)), text[:40]
    suite = synthetic_suite([300, 2048], target, count=2)
    assert "counted with target/tokenizer.json" in suite.description
    for p in suite.prompts:
        n = int(p.id.split("-")[1])
        # the stand-in's chat template: BOS, 4 framing tokens and the role before the turn, 5 after it
        assert len(chat_prompt_ids([m.model_dump() for m in p.messages], 1024)) == n + 11, p.id
