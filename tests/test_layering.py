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
    for name in ("harness.run.runner", "harness.analysis.summary", "harness.analysis.records", "harness.engines.sglang.launch", "harness.cli"):
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
        "print('LOADED:' + ','.join(m for m in ('pandas', 'textual', 'openai', 'asyncssh') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "LOADED:"
