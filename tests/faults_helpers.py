"""Shared pieces of the fault tests: plans for the stand-in and for tests/faulty_server.py, reading a run
directory back, live process groups, and the CLI as a subprocess whose stderr is read as it comes."""

from __future__ import annotations

import csv
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from harness.cli.demo import write_demo_models

REPO = Path(__file__).resolve().parent.parent
FAULTY_SERVER = Path(__file__).resolve().parent / "faulty_server.py"
SIM_LAUNCHER = ["{python}", "-m", "harness.sim"]
FAULTY_LAUNCHER = ["{python}", str(FAULTY_SERVER)]
GOOD = {
    "name": "good",
    "drafter": {"name": "good", "path": "demo-models/good-eagle3", "algorithm": "EAGLE3"},
    "num_steps": 3,
    "eagle_topk": 1,
    "num_draft_tokens": 4,
}
TOPICS = [
    "tea",
    "rivers",
    "sorting",
    "primes",
    "bridges",
    "owls",
    "glass",
    "maps",
    "clocks",
    "salt",
    "ferns",
    "kites",
]


def prompts(n: int, prefix: str = "p") -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "text": f"Tell me about {TOPICS[i % len(TOPICS)]}, part {i}."}
        for i in range(n)
    ]


def write_plan(
    path: Path,
    *,
    workdir: Path,
    launcher: list[str],
    variants: list[dict[str, Any]],
    suite_prompts: list[dict[str, Any]],
    run: dict[str, Any],
    host: str = "local",
    env: dict[str, str] | None = None,
    server: dict[str, Any] | None = None,
    sim: bool = True,
) -> Path:
    """A plan file; demo models are written under workdir when the launcher is the stand-in."""
    if sim:
        write_demo_models(workdir)
    plan = {
        "name": "faults",
        "target": {
            "host": host,
            "python": sys.executable,
            "launcher": launcher,
            "workdir": str(workdir),
            "simulated": sim,
            "env": env or {},
            "sglang_version": "0.5.15.post1",
        },
        "model": {"path": "demo-models/target"},
        "server": {
            "port": "auto",
            "max_running_requests": 16,
            "decode_log_interval": 5,
            "startup_timeout_s": 60,
            **(server or {}),
        },
        "variants": variants,
        "suites": [{"name": "s", "prompts": suite_prompts}],
        # run.repeats would default to 3 above c1; phase sizing (on by default) would cycle these small suites
        # to run.min_steady_s: these plans count their requests, so it is off unless a test turns it on
        "run": {"warmup_requests": 0, "repeats": 1, "phase_sizing": False, **run},
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def sim_env(time_scale: float = 0.3) -> dict[str, str]:
    return {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": str(time_scale)}


# ---- reading a run directory back ----------------------------------------------------------------------


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def last_variant_meta(run_dir: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in read_jsonl(run_dir / "variants.jsonl"):
        out[entry["variant"]] = entry
    return out


def started_pgids(run_dir: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for entry in read_jsonl(run_dir / "servers.jsonl"):
        if entry.get("state") == "started":
            out.setdefault(entry["variant"], []).append(int(entry["pgid"]))
    return out


def request_keys(rows: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return [(r["variant"], r["phase"], r["request_id"]) for r in rows]


def expected_keys(
    variants: list[str], n_prompts: int, repeats: int = 1, concurrency: int = 2, prefix: str = "p"
) -> set[tuple[str, str, str]]:
    return {
        (v, f"s@c{concurrency}#r{r}", f"s/{prefix}{i}")
        for v in variants
        for r in range(1, repeats + 1)
        for i in range(n_prompts)
    }


def live_groups() -> set[int]:
    """Process groups with a process that is not a zombie."""
    out = subprocess.run(["ps", "-A", "-o", "pgid=", "-o", "stat="], capture_output=True, text=True).stdout
    return {int(f[0]) for f in (line.split() for line in out.splitlines()) if len(f) >= 2 and f[1][0] != "Z"}


def wait_until(cond: Any, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll)


def kill_groups(pgids: list[int]) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def reap_servers(root: Path) -> None:
    """SIGKILL every server group recorded under root that is still one of our servers: a failed test (or
    a harness the test killed) must not leave stand-ins running."""
    if not root.exists():
        return
    pgids = [
        p for path in root.rglob("servers.jsonl") for ps in started_pgids(path.parent).values() for p in ps
    ]
    kill_groups([p for p in pgids if _is_test_server(p)])


def _is_test_server(pgid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"harness.sim" in cmdline or FAULTY_SERVER.name.encode() in cmdline


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# ---- the CLI as a subprocess ---------------------------------------------------------------------------


class Cli:
    """`python -m harness.cli ARGS` with stderr lines delivered to `wait_line` as they are printed."""

    def __init__(self, args: list[str], *, env: dict[str, str] | None = None, follow: bool = True):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        if follow:  # else nobody reads stderr: the test may close it (a terminal that went away)
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first new stderr line matching pattern (a regex)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no stderr line matching {pattern!r} within {timeout:g}s:\n"
                    + "\n".join(self.lines[-40:])
                )
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"the CLI exited (rc {self.proc.wait()}) before a line matching "
                    f"{pattern!r}:\n" + "\n".join(self.lines[-40:])
                )
            self.lines.append(line)
            if m := re.search(pattern, line):
                return m

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        """Wait for the exit; (rc, stdout, all stderr)."""
        assert self.proc.stdout is not None
        rc = self.proc.wait(timeout)  # stdout is a table and a path: far below a pipe's buffer
        out = self.proc.stdout.read()
        if self._reader.is_alive():
            self._reader.join(timeout)
        while not self._queue.empty():
            line = self._queue.get_nowait()
            if line is not None:
                self.lines.append(line)
        return rc, out, "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_dir_from(stdout: str) -> Path:
    return Path(stdout.strip().splitlines()[-1])


def only_run_dir(results: Path) -> Path | None:
    """The one run directory under results, once it exists."""
    if not results.exists():
        return None
    found = [p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(found) <= 1, found
    return found[0] if found else None
