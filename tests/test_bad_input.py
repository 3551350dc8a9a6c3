"""The bad-input corpus: every file in tests/bad_input/ names the error it must produce.

Each file starts with `# expect: LINE FIELD MESSAGE` (`-` for no line / no field), or `# expect: ok`
for values that must load unchanged (spaces, shell metacharacters). A second line
`# expect-file: NAME` says the error is reported in another corpus file (a broken reference).
JSONL files cannot carry comments, so theirs is in a `NAME.expect` sidecar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.common.errors import InputError
from harness.inputs.config import load_drafter, load_plan
from harness.inputs.importers import import_suite
from harness.inputs.suites import MAX_PROMPT_CHARS, import_question_jsonl, load_suite

CORPUS = Path(__file__).parent / "bad_input"
EXPECT_RE = re.compile(r"# expect: (?:(?P<ok>ok)|(?P<line>\d+|-) (?P<field>\S+) (?P<msg>.+))$")


@dataclass
class Expect:
    ok: bool
    line: int | None = None
    field: str | None = None
    message: str = ""
    file: Path | None = None


def _header(path: Path) -> list[str]:
    source = path.with_name(path.name + ".expect") if path.suffix == ".jsonl" else path
    head = source.read_bytes().split(b"\n")[:2]
    return [h.decode("ascii", "replace") for h in head]


def _parse_expect(path: Path) -> Expect:
    lines = _header(path)
    m = EXPECT_RE.match(lines[0])
    assert m, f"{path.name}: first line must be '# expect: ...', got {lines[0]!r}"
    if m["ok"]:
        return Expect(ok=True)
    other = (
        lines[1].removeprefix("# expect-file: ")
        if lines[1:] and lines[1].startswith("# expect-file: ")
        else None
    )
    return Expect(
        ok=False,
        line=None if m["line"] == "-" else int(m["line"]),
        field=None if m["field"] == "-" else m["field"],
        message=m["msg"],
        file=CORPUS / other if other else path,
    )


def _load(path: Path):
    name = path.name
    if name.startswith("plan"):
        return load_plan(path)
    if name.startswith("suite"):
        return load_suite(path)
    if name.startswith("drafter"):
        return load_drafter(path)
    if name.startswith("questions"):
        return import_question_jsonl(path)
    if name.startswith(("sharegpt", "specforge", "prompts")):
        return import_suite(path, fmt=name.split("-", 1)[0])
    raise AssertionError(f"{name}: corpus files start with plan, suite, drafter, questions, sharegpt, "
                         "specforge or prompts")


CASES = sorted(p for p in CORPUS.iterdir() if p.suffix in (".yaml", ".jsonl"))


def test_corpus_is_large_enough():
    bad = [p for p in CASES if not _parse_expect(p).ok]
    assert len(bad) >= 25
    assert any(not _parse_expect(p).ok for p in CASES if p.suffix == ".jsonl")


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    # Resolution also looks in the current directory; run from an empty one so results don't depend on it.
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_corpus_file(path: Path):
    expect = _parse_expect(path)
    if expect.ok:
        _load(path)  # values are checked in detail by the tests below
        return
    with pytest.raises(InputError) as info:
        _load(path)
    err = info.value
    assert (Path(err.path).resolve(), err.line, err.field) == (
        expect.file.resolve(),
        expect.line,
        expect.field,
    )
    assert expect.message in err.message
    _assert_one_clear_line(str(err))
    where = f"{err.path}:{err.line}: " if err.line else f"{err.path}: "
    assert str(err).startswith(where + (f"{err.field}: " if err.field else ""))


def _assert_one_clear_line(text: str) -> None:
    assert "\n" not in text
    for noise in (
        "Traceback",
        "errors.pydantic.dev",
        "For further information",
        "validation error",
        "[type=",
    ):
        assert noise not in text


def test_metacharacters_load_verbatim():
    plan = load_plan(CORPUS / "plan-shell-metachar.yaml")
    assert plan.name == "metachar; touch CANARY"
    assert plan.model.path == "/models/x; touch CANARY"
    assert plan.model.served_model_name == "m'; touch CANARY; echo '"
    assert plan.model.extra_args == ["--chat-template", "$(touch CANARY)", "|", "touch CANARY"]
    assert plan.target.python == "python3; touch CANARY"
    assert plan.target.workdir == "/tmp/draftbench $(touch CANARY)"
    assert plan.target.env == {"CUDA_VISIBLE_DEVICES": "0`touch CANARY`", "EXTRA": "a && touch CANARY || b"}
    drafter = plan.variant("metachar-drafter").drafter
    assert drafter is not None and drafter.path == "/models/drafters/x; touch CANARY"
    assert drafter.algorithm == "EAGLE3"
    assert plan.variant("metachar-drafter").extra_args == ["> CANARY"]
    assert plan.suites[0].prompts[0].id == "x; touch CANARY"


def test_paths_with_spaces_load_verbatim():
    plan = load_plan(CORPUS / "plan-paths-with-spaces.yaml")
    assert plan.target.workdir == "~/draft bench/work dir"
    assert plan.model.path == "/models/My Models/Kimi K2.5"
    drafter = plan.variant("spaced").drafter
    assert drafter is not None and drafter.path == "/models/draft ers/eagle 3 ckpt"


def test_huge_prompt_is_refused_with_its_line(tmp_path):
    # Generated rather than committed: a prompt just over the limit, behind a normal one.
    big = "word " * (MAX_PROMPT_CHARS // 5) + "end"
    path = tmp_path / "huge.yaml"
    path.write_text(f"name: huge\nprompts:\n  - id: ok\n    text: hi\n  - id: huge\n    text: {big}\n")
    with pytest.raises(InputError) as info:
        load_suite(path)
    err = info.value
    assert (err.line, err.field) == (6, "prompts[1].text")
    assert f"over the {MAX_PROMPT_CHARS:,}-character limit" in err.message
    assert len(str(err)) < 300
    _assert_one_clear_line(str(err))


def test_prompt_at_the_limit_loads(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(f"prompts:\n  - id: big\n    text: {'x' * MAX_PROMPT_CHARS}\n")
    assert load_suite(path).prompts[0].size_chars == MAX_PROMPT_CHARS
