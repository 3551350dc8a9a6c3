"""End to end in a real terminal: `draftbench tui plans/demo.yaml` in tmux (from another directory, a fresh
HOME), a server started from the Servers section becomes ready, and quitting asks, then stops it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.run.kept import kept_servers

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="apt-get install tmux")]


class Tmux:
    def __init__(self, cols: int, rows: int, cwd: Path, env: dict[str, str], argv: list[str]) -> None:
        self.sock = f"draftbench-test-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cmd = f"env {exports} {shlex.join(argv)}"
        self.tmux("new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows), "-c", str(cwd), cmd)

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=30)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t").stdout

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "t").returncode == 0

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def wait(self, condition, what: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.screen() if self.alive() else ""
            if condition(text):
                return text
            time.sleep(0.2)  # polling the terminal until the condition holds (deadline above), not a fixed wait
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def kill(self) -> None:
        self.tmux("kill-server")


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
def test_demo_plan_in_tmux_starts_a_server_and_quits_cleanly(tmp_path, size):
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), cwd.mkdir()
    env = {"HOME": str(home), "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "PATH": os.environ["PATH"],
           "DRAFTBENCH_SIM_STARTUP_S": "0.2", "DRAFTBENCH_SIM_TIME_SCALE": "0.05"}
    t = Tmux(*size, cwd, env, [sys.executable, "-m", "harness.cli", "tui", str(ROOT / "plans" / "demo.yaml")])
    try:
        t.wait(lambda s: "plan demo" in s and "baseline" in s, "the Servers section with the demo plan")
        t.keys("s")  # the first row: baseline
        t.wait(lambda s: any("baseline" in ln and "ready" in ln for ln in s.splitlines()), "baseline ready")
        left = kept_servers(cwd / "results", "demo")
        assert [k.variant for k in left] == ["baseline"]  # started by this session, on record
        t.keys("q")
        t.wait(lambda s: "Quitting stops" in s and "server baseline" in s, "the quit question")
        t.keys("y")
        t.wait(lambda s: not t.alive(), "the TUI gone", 60)
    finally:
        t.kill()
    assert kept_servers(cwd / "results", "demo") == []  # stopped on the way out
