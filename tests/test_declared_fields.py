"""Typed records read as declared (issue 28 point 1): no `getattr`/`hasattr` guard on an attribute its object
declares, and no bool compared with its CSV spelling, in harness/ outside sim/.

A guard is `hasattr(obj, name)` or `getattr(obj, name, default)`. Each one left is listed below with why
the object may lack the attribute; a new guard needs an entry (or, where the object declares the attribute:
a dataclass or pydantic field, a method of its class, plain attribute access). `getattr(obj, name)` without a
default, over names the object declares (a dataclass's fields, a list of columns), reads; it guards nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "harness"

# (module under harness/, the name argument as written) -> why the object may lack it
GUARDS = {
    ("cli/commands.py", "'plan'"): "argparse: `draftbench` alone has no subcommand, so none of tui's options",
    ("cli/commands.py", "'results_dir'"): "argparse: as above",
    ("cli/gate.py", "'no_check'"): "argparse: the gate is shared by commands without --no-check",
    ("cli/gate.py", "'resume'"): "argparse: only some of those commands resume",
    ("cli/gate.py", "'until_decided'"): "argparse: only run and demo have --until-decided",
    ("cli/gate.py", "'budget'"): "argparse: not every command has --budget",
    ("cli/tune.py", "'budget'"): "argparse: run's args reach run_auto; --budget is optional there",
    ("client/rxstamp.py", "'SO_TIMESTAMPNS'"): "the socket module has it on Linux only",
    ("client/stream.py", "'_stream'"): "httpx's private stream layout, present with one transport only",
    ("client/stream.py", "'_aiohttp_response'"): "as above: the SDK's aiohttp transport",
    ("client/stream.py", "'_make_status_error_from_response'"): "a private method of the openai SDK",
    ("inputs/field_messages.py", "'moved_keys'"): "a ClassVar only models with moved keys declare (Target)",
    ("inputs/yamlio.py", "'moved_keys'"): "as above",
    ("inputs/yamlio.py", "'CSafeLoader'"): "PyYAML built without libyaml lacks it",
    ("inputs/suites.py", "'CSafeDumper'"): "as above",
    ("retrain/regen_rows.py", "'reasoning_content'"): "an extra field some servers send, not the SDK's",
    ("serve/existing.py", "'authorized'"): "SGLang's admin has it; EngineAdmin does not declare it",
    ("serve/nodes.py", "'variant'"): "one of the events: only some declare a variant",
    ("studies/tune_view.py", "'item'"): "a numpy scalar has it, a Python number does not",
    ("targets/ssh.py", "'reason'"): "asyncssh's disconnect errors have it, OSError does not",
    ("tui/half.py", "ROUTE"): "the mark `handles` sets on a handler; other methods have none",
    ("tui/widgets/nav.py", "'__watchers'"): "Textual's private watcher table, absent before any watch",
}


def guards(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    """(module, name argument) -> lines, of every guard in harness/ outside sim/."""
    out: dict[tuple[str, str], list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("sim/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2):
                continue
            guard = node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)
            if guard:
                out.setdefault((rel, ast.unparse(node.args[1])), []).append(node.lineno)
    return out


def test_every_guard_left_is_one_whose_object_may_lack_the_attribute() -> None:
    found = guards()
    new = {f"{m}:{lines[0]}: {name}" for (m, name), lines in found.items() if (m, name) not in GUARDS}
    assert not new, ("guards on attributes: read a declared one plainly, or list why it may be missing",
                     sorted(new))
    gone = sorted(set(GUARDS) - set(found))
    assert not gone, ("listed guards no longer in the code", gone)


def test_the_guard_finder_sees_hasattr_and_getattr_with_a_default(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("a = getattr(x, 'f', None)\nb = hasattr(x, 'g')\nc = getattr(x, k)\n"
                                   "d = getattr(x, 'h')\n", encoding="utf-8")
    assert guards(tmp_path) == {("m.py", "'f'"): [1], ("m.py", "'g'"): [2]}


# text parsed into a value: SGLang's log line ("cuda graph: True"), and forced_value, the one reader of a
# forced_acceptance cell (an accept length; "not forced" spelt as a file gives it)
BOOL_TEXT_PARSERS = {"engines/sglang/logline.py", "analysis/forced.py"}
_BOOL_WORDS = {"True", "False", "true", "false"}


def _bool_words(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in _BOOL_WORDS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_bool_words(e) for e in node.elts)
    return False


def bool_text_compares(root: Path = ROOT) -> list[str]:
    """`x == "True"`, `x in (True, "True")` and the like in harness/ outside sim/ and the log parsers."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("sim/") or rel in BOOL_TEXT_PARSERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(_bool_words(e) for e in (node.left, *node.comparators)):
                out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_bools_are_parsed_once_as_read_never_compared_with_their_text() -> None:
    assert bool_text_compares() == []


def test_the_compare_finder_sees_each_spelling(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("a = str(x) == 'True'\nb = x in (True, 'True', 1)\nc = x is True\n"
                                   "d = {'True': True}.get(x)\n", encoding="utf-8")
    assert [line.split(":")[1] for line in bool_text_compares(tmp_path)] == ["1", "2"]
