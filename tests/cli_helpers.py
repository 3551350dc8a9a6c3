"""Shared by the CLI tests: the CLI in a fresh process (`cli`) or in this one (`cli_here`), a small copy of
the demo plan, a busy port."""

from __future__ import annotations

import contextlib
import io
import os
import signal
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


def cli_here(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`cli` without the process: harness.cli.main in this one, with `cli`'s working directory, environment
    (cli_env, plus `env`) and argv, its stdout and stderr captured and its exit status returned as the
    process's would be. For tests of what a command prints, writes and returns, not of the process around it
    (signals, a terminal, the installed script): no interpreter start and no imports, ~1.5 s of CPU a call.
    The signal handlers a command installs are put back afterwards."""
    from harness.cli import main

    argv = [str(ROOT / "harness" / "cli" / "__main__.py"), *args]
    saved_env = dict(os.environ)
    saved_cwd, saved_argv = os.getcwd(), sys.argv
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update({**cli_env(cwd), **(env or {})})
        os.chdir(cwd)
        sys.argv = argv
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as exc:  # argparse: a usage error (2), --help and --version (0)
                code = exc.code
                rc = code if isinstance(code, int) else 0 if code is None else 1
                if isinstance(code, str):
                    print(code, file=sys.stderr)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for sig, handler in saved_signals.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(sig, handler)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


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
