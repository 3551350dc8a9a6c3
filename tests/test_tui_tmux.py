"""End to end in a real terminal: `draftbench tui plans/demo.yaml` in tmux (from another directory, a fresh
HOME), a server started from the Servers section becomes ready, and quitting asks, then stops it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.serve.kept import kept_servers

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="apt-get install tmux")]


class Tmux:
    def __init__(self, cols: int, rows: int, cwd: Path, env: dict[str, str], argv: list[str]) -> None:
        self.sock = f"draftbench-test-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # COLUMNS/LINES inherited from the test process would override the pane's size
        # (shutil.get_terminal_size)
        cmd = f"env -u COLUMNS -u LINES {exports} {shlex.join(argv)}"
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
            # polling the terminal until the condition holds (deadline above), not a fixed wait
            time.sleep(0.2)
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


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
def test_the_demo_fits_a_real_terminal(tmp_path, size):
    """The demo plan's screens at both sizes, in a real terminal: footers whole (`f Decode filte` was cut at
    80x24), the alarms column reached with the arrow keys (`warning: cuda-graph-d`), the Run form's Start in
    view, the preflight's findings as a table."""
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), cwd.mkdir()
    env = {"HOME": str(home), "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "PATH": os.environ["PATH"]}
    t = Tmux(*size, cwd, env, [sys.executable, "-m", "harness.cli", "tui", str(ROOT / "plans" / "demo.yaml")])
    try:
        text = t.wait(lambda s: "plan demo" in s and "seed-weak-eagle3" in s and "cuda-graph" in s,
                      "the Servers section with the demo plan's alarms")
        footer = text.rstrip("\n").splitlines()[-1]
        assert max(len(ln) for ln in text.splitlines()) == size[0], text  # drawn at the pane's own size
        assert "? Help" in footer and "q Quit" in footer and "^p palette" in footer, footer
        assert "Decode filte " not in footer + " "  # a key is shown whole or not at all
        for _ in range(7):  # a whole column per press
            t.keys("Right")
        t.wait(lambda s: any("seed-weak-eagle3" in ln and "warning: cuda-graph-disabled" in ln
                             for ln in s.splitlines()), "the whole alarm beside its variant")
        t.keys("2")
        t.wait(lambda s: re.search(r"\bStart\b\s+Cancel\b", s) is not None and "Keep servers" in s,
               "the Run form with Start in view")
        t.keys("C-p")
        t.wait(lambda s: "Search for commands" in s, "the palette")
        t.keys("-l", "preflight")
        t.wait(lambda s: "Preflight: draftbench check" in s, "the preflight command")
        t.keys("Enter")
        t.wait(lambda s: "draftbench check" in s and any(
            "warning" in ln and "seed-weak-eagle3" in ln and "CUDA graphs" in ln for ln in s.splitlines()),
            "the findings, one row each", 60)
        t.keys("Escape")
        t.wait(lambda s: "draftbench check" not in s, "the findings closed")
        t.keys("q")
        t.wait(lambda s: not t.alive(), "the TUI gone", 30)
    finally:
        t.kill()
