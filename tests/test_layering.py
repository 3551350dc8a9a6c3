"""The core never imports textual (STYLE.md rule 1): checked in a fresh interpreter."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import harness

CORE = sorted(
    m.name
    for m in pkgutil.walk_packages([str(Path(harness.__file__).parent)], prefix="harness.")
    if not m.name.startswith("harness.tui")
)


def test_core_modules_exist():
    for name in ("harness.bench.runner", "harness.analysis.summary", "harness.analysis.records",
                 "harness.engines.sglang.launch", "harness.cli"):
        assert name in CORE


def test_core_does_not_import_textual():
    code = (
        "import importlib, sys\n"
        f"for m in {CORE!r}:\n"
        "    if m.endswith('__main__'): continue\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core imported textual: {out.stdout.strip()[:200]}"


def test_cli_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from harness import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LOADED:' + ','.join(m for m in ('pandas', 'textual', 'openai', 'asyncssh') if m in "
        "sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "LOADED:"


# The layers, lowest first (AGENTS.md's map). A module may import its own package and any lower layer,
# never a higher one: that keeps the tree reading like the architecture and the engine seam honest.
LAYERS = [
    ("harness.common",),
    ("harness.inputs",),
    ("harness.targets", "harness.client"),
    ("harness.sim",),  # the stand-ins: a program of their own, below the engines whose checks can ask them
    ("harness.engines",),
    ("harness.checks",),
    ("harness.analysis",),
    ("harness.serve",),  # server lifecycle: one server, kept and adopted servers, fleets
    ("harness.bench",),  # the benchmark pipeline (run_plan), on the servers of serve/
    ("harness.studies", "harness.retrain"),  # made of runs: tune and breakeven; regen and training
    ("harness.cli", "harness.tui"),
]
ENGINE_PACKAGES = {p.name for p in (Path(harness.__file__).parent / "engines").iterdir()
                   if (p / "__init__.py").exists()}
ENGINE_FREE = ("harness.serve", "harness.bench", "harness.studies", "harness.analysis", "harness.checks",
               "harness.tui", "harness.retrain")


def _layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _modules() -> list[tuple[str, Path]]:
    root = Path(harness.__file__).parent
    return [(("harness." + ".".join(p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"), p)
            for p in sorted(root.rglob("*.py"))]


def test_no_module_imports_a_higher_layer():
    upward = []
    for name, path in _modules():
        mine = _layer(name)
        if mine is None:
            continue
        for line, imported in _imports(path):
            theirs = _layer(imported)
            if imported.startswith("harness") and theirs is not None and theirs > mine:
                upward.append(f"{path.name}:{line} ({name}) imports {imported}")
    assert not upward, "\n".join(upward)


def test_every_harness_module_has_a_layer():
    flat = [name for name, _ in _modules() if name != "harness" and _layer(name) is None]
    assert not flat, f"modules outside every layer package: {flat}"


def test_the_pipeline_never_names_an_engine_package():
    named = []
    for name, path in _modules():
        if not name.startswith(ENGINE_FREE):
            continue
        for line, imported in _imports(path):
            if imported.startswith("harness.engines.") and imported.split(".")[2] in ENGINE_PACKAGES:
                named.append(f"{name}:{line} imports {imported}")
    assert not named, "\n".join(named)
