"""The built wheel, installed (not editable) into a fresh venv, runs `draftbench demo` from an empty
directory.

Catches packaging that an editable install hides: the demo's plan, suites and drafters (force-included
as harness/_data), the TUI's tcss and the stand-in's modules must all be inside the wheel. Needs the
package index (the wheel's build backend and its dependencies are installed by pip).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _run(argv: list[str], *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert out.returncode == 0, \
        f"{argv[:4]} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_installed_wheel_runs_the_demo_from_an_empty_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
         timeout=600, env=env)
    (wheel,) = dist.glob("draftbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("harness/_data/plans/demo.yaml", "harness/_data/suites/smoke.yaml",
                 "harness/_data/drafters/demo-good-eagle3.yaml", "harness/tui/draftbench.tcss"):
        assert name in names, f"{name} is not in {wheel.name}"

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300, env=env)  # no --system-site-packages
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], timeout=900, env=env)

    empty = tmp_path / "empty"
    home = tmp_path / "home"
    empty.mkdir()
    home.mkdir()
    env = {**env, "HOME": str(home), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    where = _run([str(python), "-c", "import harness; print(harness.__file__)"], timeout=60, cwd=empty,
                 env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the wheel's copy, not the checkout

    results = tmp_path / "results"
    demo = _run([str(venv / "bin" / "draftbench"), "demo", "--results-dir", str(results)],
                timeout=900, cwd=empty, env=env, stdin=subprocess.DEVNULL)
    assert "SIMULATED: numbers from draftbench's SGLang stand-in" in demo.stdout
    for variant in ("baseline", "good-eagle3", "seed-weak-eagle3", "wrong-flag-eagle"):
        assert variant in demo.stdout, demo.stdout
    runs = [d for d in results.iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert len(runs) == 1 and (runs[0] / "summary.csv").is_file(), sorted(p.name for p in results.iterdir())
    # the demo decides every row, at concurrency 1 and 4 (phase sizing and the stopping rule, docs/metrics.md)
    import pandas as pd

    summary = pd.read_csv(runs[0] / "summary.csv")
    spec = summary[summary["baseline"].astype(str) != "True"]
    assert len(spec) == 6 and set(spec["concurrency"]) == {1, 4}
    assert spec["verdict"].isin(["faster", "slower", "equivalent"]).all(), \
        spec[["variant", "concurrency", "verdict"]]
    by = spec.set_index(["variant", "concurrency"])["verdict"]
    assert by[("good-eagle3", 1)] == "faster" and by[("seed-weak-eagle3", 4)] == "slower"
    assert list(empty.iterdir()) == []  # nothing written to the working directory
