"""No module of harness/ imports, however indirectly, a module that imports it back: the import graph has no
cycle. Every import counts, at the top of a module, inside a function (deferred for start-up speed) or under
TYPE_CHECKING, since an import moved into a function still ties the two modules together: it only hides the
cycle from the interpreter until the function runs. A package's __init__ is not taken as imported by its
own modules (Python runs it first, but it is no dependency of theirs)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every module under root/package."""
    base = root / package
    out = {}
    for path in sorted(base.rglob("*.py")):
        parts = (package, *path.relative_to(base).with_suffix("").parts)
        out[".".join(parts).removesuffix(".__init__")] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, here: str, is_package: bool,
              known: dict[str, Path]) -> list[str]:
    """The modules of `known` an import statement in module `here` loads (a name imported from a package
    that is one of its modules counts as that module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's own package, one level up per further dot
            parts = here.split(".") if is_package else here.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # `import a.b.c` of a name inside a module: that module
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports anywhere in its text."""
    known = modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= set(_imported(node, name, path.name == "__init__.py", known)) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_harness_has_no_import_cycle():
    graph = import_graph(ROOT, "harness")
    assert len(graph) > 100 and "harness.bench.runner" in graph["harness.studies.tune"]
    assert cycles(graph) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def test_a_cycle_behind_an_import_inside_a_function_is_found(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.low import f\n",
        "pkg/low.py": "def f():\n    from pkg.high import g  # deferred\n    return g()\n",
        "pkg/high.py": "from pkg import low\n\ndef g():\n    return low\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..sub import b\n",
        "pkg/sub/b.py": "import pkg.sub.a.thing\n",
        "pkg/alone.py": "import pkg.low\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.high"] == {"pkg.low"}  # `from pkg import low`: the module, not the package
    assert graph["pkg.sub.a"] == {"pkg.sub.b"}  # relative, under TYPE_CHECKING
    assert graph["pkg.sub.b"] == {"pkg.sub.a"}  # a name inside a module: that module
    assert cycles(graph) == [["pkg.high", "pkg.low"], ["pkg.sub.a", "pkg.sub.b"]]
    # the package's own __init__ importing its module is no cycle with the modules that import the package
    assert "pkg" not in {m for c in cycles(graph) for m in c}
