"""Every command follows the one exit-code table (harness.common.errors.EXIT_MEANINGS, quoted by the README
and `draftbench --help`): 0 ok, 1 the command ran and something failed, 2 bad input or a failed preflight,
130 interrupted. Each case runs the real CLI in its own process."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness.common.errors import EXIT_MEANINGS
from tests.cli_helpers import DEMO, ROOT, busy_port_fixture, cli, cli_env, run_dirs, small_plan  # noqa: F401

SNAP = sorted((ROOT / "tests" / "snapshots" / "results").iterdir())
LOG = ROOT / "tests" / "fixtures" / "sglang-0.5.15.post1" / "server-eagle3.log"


def test_the_readme_and_help_quote_the_one_table(tmp_path):
    readme = " ".join((ROOT / "README.md").read_text().split())
    help_text = cli("--help", cwd=tmp_path).stdout
    for code, what in EXIT_MEANINGS.items():
        assert f"{code} {what}" in readme
        assert f"{code:<4} {what}" in help_text


def _prompts(tmp_path: Path) -> str:
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": f"say {i}"}) + "\n" for i in range(3)))
    return "p.jsonl"


def _bad_plan(tmp_path: Path) -> str:
    (tmp_path / "bad.yaml").write_text("name: x\nmodel: {path: /m, tp_size: 0}\nvariants: [{name: "
                                       "baseline}]\nsuites: [smoke]\n")
    return "bad.yaml"


def _undeclared_demo(tmp_path: Path) -> str:
    plan = yaml.safe_load(DEMO.read_text())
    for v in plan["variants"]:
        v.pop("expect", None)
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    return "wrong.yaml"


OK_CASES = {
    "version": lambda t: ["--version"],
    "check": lambda t: ["check", str(DEMO), "--results-dir", "r"],
    "parse-log": lambda t: ["parse-log", str(LOG), "--csv", "w.csv"],
    "summary": lambda t: ["summary", str(SNAP[0])],
    "compare": lambda t: ["compare", str(SNAP[0]), str(SNAP[-1])],
    "import-suite": lambda t: ["import-suite", _prompts(t), "--out", "s.yaml"],
    "jobs": lambda t: ["jobs", "list", "--results-dir", "r"],
    "sim-server": lambda t: ["sim-server", "--help"],
    "run": lambda t: ["run", str(small_plan(t, variants=("baseline",))), "--results-dir", "r"],
}

BAD_INPUT_CASES = {
    "no command known": lambda t: ["frobnicate"],
    "demo flag": lambda t: ["demo", "--bogus"],
    "run missing plan": lambda t: ["run", "nope.yaml"],
    "run bad plan": lambda t: ["run", _bad_plan(t)],
    "run failed preflight": lambda t: ["run", _undeclared_demo(t), "--results-dir", "r"],
    "check bad plan": lambda t: ["check", _bad_plan(t)],
    "check failed preflight": lambda t: ["check", _undeclared_demo(t), "--results-dir", "r"],
    "parse-log missing": lambda t: ["parse-log", "nope.log"],
    "summary missing": lambda t: ["summary", "nope"],
    "compare missing": lambda t: ["compare", "nope", str(SNAP[0])],
    "import-suite missing": lambda t: ["import-suite", "nope.jsonl", "--out", "s.yaml"],
    "tune missing plan": lambda t: ["tune", "nope.yaml"],
    "tune report not a tune dir": lambda t: ["tune", "--report", "."],
    "breakeven missing plan": lambda t: ["breakeven", "nope.yaml", "--variant", "x"],
    "breakeven unknown variant": lambda t: ["breakeven", str(small_plan(t)), "--variant", "x",
                                            "--results-dir", "r"],
    "regen missing input": lambda t: ["regen", str(DEMO), "--input", "nope.jsonl", "--output", "o.jsonl"],
    "train missing plan": lambda t: ["train", "nope.yaml", "--data", "d", "--output-dir", "o"],
    "jobs without an id": lambda t: ["jobs", "follow", "--results-dir", "r"],
    "sim-server flag": lambda t: ["sim-server", "--no-such-flag"],
}


@pytest.mark.parametrize("case", list(OK_CASES))
def test_exit_0_ok(tmp_path, case):
    out = cli(*OK_CASES[case](tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("case", list(BAD_INPUT_CASES))
def test_exit_2_bad_input_or_failed_preflight(tmp_path, case):
    out = cli(*BAD_INPUT_CASES[case](tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    if case == "check failed preflight":  # the findings are check's data: stdout
        assert out.stdout.rstrip().endswith("info") and "1 error," in out.stdout
    elif not case.startswith(("no command", "demo flag", "sim-server")):  # argparse's usage lines aside
        assert out.stderr.startswith("error: "), out.stderr


@pytest.mark.parametrize("command", [["run"],
                                     ["breakeven", "--variant", "good-eagle3", "--accept-lens", "1.5,2.5"]])
def test_exit_1_the_run_finished_with_failures(tmp_path, busy_port, command):
    plan = small_plan(tmp_path, port=busy_port)
    out = cli(command[0], str(plan), *command[1:], "--results-dir", "r", "--no-check", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr


def _stderr_lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stderr:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: queue.Queue, needle: str, seen: list[str], deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            line = q.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            raise AssertionError("the command ended before " + repr(needle) + ":\n" + "".join(seen))
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"no {needle!r} within {deadline_s} s:\n" + "".join(seen))


REGEN = ["regen", "--input", "in.jsonl", "--output", "out.jsonl", "--max-tokens", "4000",
         "--concurrency", "1"]


@pytest.mark.parametrize(("command", "sig", "needle"), [
    (["run"], signal.SIGTERM, "server ready"), (["run"], signal.SIGINT, "server ready"),
    (["breakeven", "--variant", "good-eagle3", "--accept-lens", "1.5,2.5"], signal.SIGTERM, "server ready"),
    (REGEN, signal.SIGTERM, "1/20 rows")])
def test_exit_130_interrupted(tmp_path, command, sig, needle):
    plan = small_plan(tmp_path, variants=("baseline", "good-eagle3"), max_tokens=4000)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": f"r{i}", "conversations": [
        {"role": "user", "content": f"a story {i}"}]}) + "\n" for i in range(20)))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", command[0], str(plan), *command[1:],
                             "--results-dir", "r"], cwd=tmp_path, env=cli_env(tmp_path), text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: list[str] = []
    try:
        q = _stderr_lines(proc)
        _wait_for(q, needle, seen)
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if command[0] != "regen":
        assert len(run_dirs(tmp_path / "r")) == 1
