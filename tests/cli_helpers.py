"""Shared by the CLI subprocess tests: the CLI in a fresh process, a small copy of the demo plan, a busy
port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "plans" / "demo.yaml"


def cli_env(cwd: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(cwd), timeout=300)


def small_plan(tmp_path: Path, *, port: int | str = "auto", drafter: str = "demo-good-eagle3",
               variants: tuple[str, ...] = ("baseline", "good-eagle3"), **run: object) -> Path:
    """The demo plan cut to baseline + good-eagle3, one level, few tokens."""
    plan = yaml.safe_load(DEMO.read_text())
    plan["target"]["workdir"] = str(tmp_path / "nowhere")  # the demo's checkpoints go under the results dir
    plan["server"]["port"] = port
    plan["variants"] = [v for v in plan["variants"] if v["name"] in variants]
    for v in plan["variants"]:
        if v["name"] == "good-eagle3":
            v["drafter"] = drafter
    plan["run"].update({"concurrency": [1], "max_tokens": 16, "warmup_requests": 0, **run})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run_dirs(results: Path) -> list[Path]:
    return [d for d in results.iterdir() if not d.name.startswith(".")] if results.exists() else []


@pytest.fixture(name="busy_port")
def busy_port_fixture():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()
