"""Cleanup that a second Ctrl-C cannot cut short, and a clear line (pgid, host, the command that stops it)
whenever a server may be left running: a third Ctrl-C, a SIGKILLed harness (told by the next command that
touches the results dir or the run), a permanently lost SSH link."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    Cli,
    kill_groups,
    live_groups,
    only_run_dir,
    prompts,
    read_csv,
    reap_servers,
    sim_env,
    started_pgids,
    wait_until,
    write_plan,
)
from tests.sshd import sshd_missing_reason, start_sshd

pytestmark = pytest.mark.slow
EXIT_INTERRUPTED = 130
LEFT = re.compile(r"warning: \[(\S+)\] its server may still be running.*: pgid (\d+) on "
                  r"(.+); stop it with `(.+)`")


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _plan(tmp_path: Path, host: str = "local") -> Path:
    return write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                      env=sim_env(0.3), host=host, variants=[{"name": "baseline"}, GOOD],
                      suite_prompts=prompts(8), run={"concurrency": [2], "max_tokens": 96, "repeats": 2})


def _started(tmp_path: Path, *extra: str) -> tuple[Cli, Path]:
    results = tmp_path / "results"
    cli = Cli(["run", str(_plan(tmp_path)), "--results-dir", str(results), *extra])
    wait_until(lambda: only_run_dir(results) is not None, 30, "the run directory")
    run_dir = only_run_dir(results)
    assert run_dir is not None
    wait_until(lambda: read_csv(run_dir / "requests.csv"), 60, "a finished request")
    return cli, run_dir


def test_a_second_ctrl_c_does_not_orphan_the_server(tmp_path: Path):
    cli, run_dir = _started(tmp_path)
    try:
        cli.proc.send_signal(signal.SIGINT)
        remote_log = tmp_path / "work" / "runs" / run_dir.name / "baseline.log"
        wait_until(lambda: "SIGTERM" in remote_log.read_text(errors="replace"), 30, "the cleanup to begin")
        cli.proc.send_signal(signal.SIGINT)  # during the cleanup
        rc, _out, err = cli.finish(60)
    finally:
        cli.kill()
    assert rc == EXIT_INTERRUPTED, err
    pgids = [p for ps in started_pgids(run_dir).values() for p in ps]
    assert pgids and not set(pgids) & live_groups()  # the cleanup finished what it started
    assert "Traceback" not in err and not LEFT.search(err)
    assert "interrupted: servers stopped, finished requests kept" in err


def test_a_third_ctrl_c_leaves_servers_and_names_each_one(tmp_path: Path):
    cli, run_dir = _started(tmp_path)
    try:
        for _ in range(3):
            cli.proc.send_signal(signal.SIGINT)
            if cli.proc.poll() is not None:
                break
        rc, _out, err = cli.finish(60)
    finally:
        cli.kill()
    assert rc == EXIT_INTERRUPTED, err
    named = {int(m[2]): m for m in LEFT.finditer(err)}
    alive = {p for ps in started_pgids(run_dir).values() for p in ps} & live_groups()
    try:
        assert alive <= set(named), err  # every server left running is named ...
        for pgid, m in named.items():
            # ... with the command that stops it
            assert m[3] == "this machine" and m[4] == f"kill -TERM -- -{pgid}"
        if named:
            assert "interrupted: finished requests kept" in err and "servers stopped" not in err
    finally:
        kill_groups(list(alive))


def test_after_a_sigkill_the_next_command_says_a_server_was_left(tmp_path: Path):
    cli, run_dir = _started(tmp_path)
    cli.proc.send_signal(signal.SIGKILL)
    cli.proc.wait(30)
    orphans = [p for ps in started_pgids(run_dir).values() for p in ps if p in live_groups()]
    assert orphans
    try:
        out = subprocess.run([sys.executable, "-m", "harness.cli", "summary", str(run_dir)],
                             capture_output=True, text=True, timeout=120)
        lines = [m for m in LEFT.finditer(out.stderr)]
        assert {int(m[2]) for m in lines} == set(orphans), out.stderr
        assert all(m[4] == f"kill -TERM -- -{m[2]}" and "was killed before it stopped it" in m[0]
                   for m in lines)
        # a new run into the same results dir says it too, before it starts
        again = Cli(["run", str(tmp_path / "plan.yaml"), "--results-dir", str(run_dir.parent)])
        try:
            m = LEFT.search(again.wait_line(r"its server may still be running").string)
            assert m and int(m[2]) in orphans
        finally:
            again.proc.send_signal(signal.SIGINT)
            again.finish(60)
            again.kill()
    finally:
        kill_groups(orphans)


@pytest.mark.ssh
@pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")
def test_a_lost_ssh_link_names_the_real_port_and_the_server_left(tmp_path: Path):
    sshd = start_sshd(tmp_path / "sshd")
    try:
        results = tmp_path / "results"
        plan = _plan(tmp_path, host=sshd.alias)
        home = tmp_path / "home"  # a HOME whose ~/.ssh points at the loopback sshd
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        (home / ".ssh" / "config").write_text(Path(sshd.ssh_config).read_text())
        (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
        cli = Cli(["run", str(plan), "--results-dir", str(results)], env={"HOME": str(home)})
        try:
            wait_until(lambda: only_run_dir(results) is not None, 30, "the run directory")
            run_dir = only_run_dir(results)
            wait_until(lambda: read_csv(run_dir / "requests.csv"), 90, "a finished request")
            sessions = sshd.session_pids()
            sshd.stop()  # no new connections, ever ...
            for pid in sessions:  # ... and the live ones cut
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            rc, _out, err = cli.finish(300)
        finally:
            cli.kill()
        assert rc == 1, err
        error = next(ln for ln in err.splitlines() if ln.startswith("error: "))
        assert f":{sshd.port}" in error and ":22 " not in error, error
        left = [m for m in LEFT.finditer(err)]
        pgids = {p for ps in started_pgids(run_dir).values() for p in ps}
        assert left and {int(m[2]) for m in left} <= pgids
        assert all(m[3] == sshd.alias and m[4] == f"ssh {sshd.alias} 'kill -TERM -- -{m[2]}'" for m in left)
        kill_groups([p for p in pgids if p in live_groups()])
    finally:
        sshd.stop()
