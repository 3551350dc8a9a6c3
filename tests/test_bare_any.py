"""Real types at the seams (issue 28 point 2): the number of bare `Any` annotations in harness/ outside
sim/ stays at or below its bound, so the count cannot creep back up.

A bare `Any` is a parameter (*args and **kwargs included), an attribute or variable (`x: Any`, `self.x: Any`)
or a return annotated with `Any` alone (`Any`, `typing.Any`, or the string `"Any"`). `Any` inside another
type (`dict[str, Any]` for a JSON payload, `Callable[..., Any]`) is not bare."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "harness"

# 424 when issue 28 was filed; the issue asks for at least 80 % fewer (<= 84). Lower it as the count falls.
# The two left: SamplingClient.__getattr__ (a proxy: whatever the client has) and Half.app (the App's
# module imports harness.tui.half, so its type is not imported back).
BOUND = 2


def _is_bare_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any" and isinstance(node.value, ast.Name) and node.value.id in {"typing", "t"}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip() in {"Any", "typing.Any"}
    return False


def bare_any(source: str) -> list[tuple[int, str]]:
    """(line, what) of every bare `Any` annotation in one module's source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            found += [(p.lineno, f"{node.name}({p.arg})") for p in params if _is_bare_any(p.annotation)]
            if _is_bare_any(node.returns):
                found.append((node.lineno, f"{node.name} -> Any"))
        elif isinstance(node, ast.AnnAssign) and _is_bare_any(node.annotation):
            found.append((node.lineno, ast.unparse(node.target)))
    return found


def count(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    """Bare `Any` annotations per module of harness/ outside sim/ (paths relative to harness/)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("sim/"):
            continue
        hits = bare_any(path.read_text(encoding="utf-8"))
        if hits:
            out[rel] = hits
    return out


def test_the_counter_sees_every_kind_of_bare_any() -> None:
    src = (
        "from typing import Any\nimport typing\n"
        "class C:\n    a: Any\n    b: 'Any'\n    c: dict[str, Any]\n"
        "    def m(self, x: Any, *args: Any, y: typing.Any = 1, **kw: Any) -> Any:\n"
        "        self.d: Any = x\n        return x\n"
        "async def f(p: Any | None, q: list[Any]) -> dict[str, Any]: ...\n"
    )
    hits = bare_any(src)
    assert [w for _, w in hits] == ["a", "b", "m(x)", "m(y)", "m(args)", "m(kw)", "m -> Any", "self.d"]


def test_bare_any_stays_under_its_bound() -> None:
    per_module = count()
    total = sum(len(v) for v in per_module.values())
    if total > BOUND:
        worst = sorted(per_module.items(), key=lambda kv: -len(kv[1]))[:10]
        lines = "\n".join(f"  {len(v):3d} {k}: {', '.join(w for _, w in v[:6])}" for k, v in worst)
        pytest.fail(f"{total} bare Any annotations in harness/ outside sim/ (bound {BOUND}):\n{lines}")


if __name__ == "__main__":
    per = count()
    by_pkg: dict[str, int] = {}
    for mod, hits in per.items():
        pkg = mod.split("/")[0] if "/" in mod else mod
        by_pkg[pkg] = by_pkg.get(pkg, 0) + len(hits)
    for mod, hits in sorted(per.items()):
        print(f"{len(hits):4d} {mod}")
    print(by_pkg)
    print("total", sum(by_pkg.values()))
