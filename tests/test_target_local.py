"""LocalTarget with real processes, plus the shell-building helpers every target uses.

The `check_*` coroutines take any Target; tests/test_target_ssh.py runs them over a real sshd too.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from harness.common.errors import HarnessError
from harness.targets import open_target
from harness.targets.base import (
    FREE_PORT_SH,
    Target,
    command_line,
    free_port,
    group_alive_in,
    parse_free_port,
    ports_in_use,
    quote_path,
)
from harness.targets.local import LocalTarget

NASTY = [
    "x; touch CANARY",
    "$(touch CANARY2)",
    "`touch CANARY3`",
    "a b\tc\nd",
    'it\'s "quoted" \\ back',
    "*",
    "~",
    "-n",
    "",
    "ünï ☃",
    "$HOME ${PATH} !x",
    "a=b",
]
ARGV_DUMP = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


async def eventually(pred: Callable[[], Awaitable[bool]], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def next_block(it, timeout: float = 20.0) -> bytes:
    return await asyncio.wait_for(it.__anext__(), timeout)


# --- checks shared with the SSH suite -------------------------------------------------------------


async def check_run_basics(t: Target, tmp: Path) -> None:
    res = await t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    res = await t.run(
        ["sh", "-c", 'echo "$DB_A|$DB_B"; pwd'], env={"DB_A": "1 2", "DB_B": "$(x)"}, cwd=str(tmp)
    )
    assert res.stdout.splitlines() == ["1 2|$(x)", str(tmp)]
    assert (await t.run(["definitely-not-a-command-xyz"])).rc == 127
    assert (await t.run(["true"], cwd=str(tmp / "missing"))).rc != 0
    with pytest.raises(HarnessError, match="timed out"):
        await t.run(["sh", "-c", "sleep 37.25; echo never"], timeout=0.5)
    await eventually(lambda: _not(_running(t, "sleep 37.25")), "the timed-out command to be killed")
    with pytest.raises(HarnessError, match="invalid environment variable name"):
        await t.run(["true"], env={"A;touch CANARY4": "1"})


async def check_quote_safety(t: Target, tmp: Path, default_cwd: Path) -> None:
    """Hostile values arrive verbatim as argv, env and cwd, and no shell ever runs them.
    default_cwd: where a command without cwd runs (where an injected `touch` would land)."""
    res = await t.run([*ARGV_DUMP, *NASTY])
    assert json.loads(res.stdout) == NASTY
    odd_dir = tmp / "d i r;$(touch CANARY5)'\""
    odd_dir.mkdir()
    res = await t.run(
        [*ARGV_DUMP, *NASTY], env={"DB_X": "v; touch CANARY6 $(touch CANARY7)"}, cwd=str(odd_dir)
    )
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout) == NASTY
    res = await t.run(
        [sys.executable, "-c", "import os; print(os.environ['DB_X']); print(os.getcwd())"],
        env={"DB_X": "v; touch CANARY6 $(touch CANARY7)"},
        cwd=str(odd_dir),
    )
    assert res.stdout.splitlines() == ["v; touch CANARY6 $(touch CANARY7)", str(odd_dir)]
    canaries = [p for d in (tmp, odd_dir, default_cwd) for p in d.glob("CANARY*")]
    assert canaries == []


async def check_spawn_kill_group(t: Target, tmp: Path) -> None:
    log, pid = tmp / "srv.log", tmp / "srv.pid"
    log.write_text("earlier run\n")
    # sh plus two children, all in the new group; the children outlive a SIGTERM to sh alone
    argv = ["sh", "-c", 'echo "started $DB_MODE in $(pwd)"; echo oops >&2; sleep 300 & sleep 301 & wait']
    pgid = await t.spawn(argv, env={"DB_MODE": "a b"}, cwd=str(tmp), log_path=str(log), pid_path=str(pid))
    assert pid.read_text().strip() == str(pgid)
    await eventually(lambda: _group_size_at_least(t, pgid, 3), "sh and both sleeps in the group")
    ps = await t.run(["ps", "-o", "sid=", "-p", str(pgid)])
    assert ps.stdout.strip() == str(pgid)  # session leader: setsid, no controlling terminal of ours
    await eventually(lambda: _contains(log, "oops"), "output in the log")
    assert log.read_text().splitlines()[:3] == ["earlier run", f"started a b in {tmp}", "oops"]
    assert await t.alive(pgid)
    assert await t.kill_group(pgid, term_timeout=10)
    assert not await t.alive(pgid)
    assert not group_alive_in((await t.run(["ps", "-A", "-o", "pgid=", "-o", "stat="])).stdout, pgid)


async def check_kill_escalates(t: Target, tmp: Path) -> None:
    """A group that ignores SIGTERM is SIGKILLed after term_timeout."""
    argv = ["sh", "-c", "trap '' TERM; echo ready; sleep 300 & wait"]
    log, pid = tmp / "stubborn.log", tmp / "stubborn.pid"
    pgid = await t.spawn(argv, env={}, cwd=str(tmp), log_path=str(log), pid_path=str(pid))
    await eventually(lambda: _group_size_at_least(t, pgid, 2), "the stubborn group")
    assert await t.kill_group(pgid, term_timeout=0.3)
    assert not await t.alive(pgid)


async def check_spawn_errors(t: Target, tmp: Path) -> None:
    with pytest.raises(HarnessError, match="cannot start"):
        await t.spawn(["true"], env={}, cwd=str(tmp / "nope"), log_path="x.log", pid_path="x.pid")
    with pytest.raises(HarnessError, match="cannot start"):
        await t.spawn(["true"], env={}, cwd=str(tmp), log_path=str(tmp / "nope" / "x.log"), pid_path="x.pid")
    # a command that cannot be executed still gets its pgid; the reason lands in the log
    log = tmp / "bad.log"
    pgid = await t.spawn(
        ["/no/such/prog"], env={}, cwd=str(tmp), log_path=str(log), pid_path=str(tmp / "bad.pid")
    )
    await eventually(lambda: _not(t.alive(pgid)), "the failed process to go")
    assert "/no/such/prog" in log.read_text()
    for bad in (0, 1, -5):
        with pytest.raises(HarnessError, match="refusing"):
            await t.kill_group(bad)


async def check_tail(t: Target, tmp: Path) -> None:
    path = tmp / "grow.log"
    it = t.tail(str(path), offset=0)
    first = asyncio.ensure_future(next_block(it))
    path.write_bytes(b"first\n")  # created after the tail started
    got = await first
    with path.open("ab") as f:
        f.write(b"second\n")
    while len(got) < path.stat().st_size:
        got += await next_block(it)
    assert got == b"first\nsecond\n"
    await it.aclose()
    it = t.tail(str(path), offset=6)
    assert await next_block(it) == b"second\n"
    await it.aclose()


async def check_files(t: Target, tmp: Path) -> None:
    target_dir = tmp / "a b" / "c"
    made = await t.makedirs_private(str(target_dir))
    assert made == str(target_dir)
    assert stat.S_IMODE(target_dir.stat().st_mode) == 0o700
    assert await t.makedirs_private(str(target_dir)) == made  # idempotent
    blob = bytes(range(256)) * 3
    (target_dir / "blob").write_bytes(blob)
    assert await t.read_file(str(target_dir / "blob")) == blob
    assert await t.read_file(str(target_dir / "blob"), max_bytes=10) == blob[:10]
    with pytest.raises(FileNotFoundError):
        await t.read_file(str(tmp / "missing"))


async def _group_size_at_least(t: Target, pgid: int, n: int) -> bool:
    out = (await t.run(["ps", "-A", "-o", "pgid=", "-o", "stat="])).stdout
    return sum(1 for line in out.splitlines() if line.split()[:1] == [str(pgid)] and "Z" not in line) >= n


async def _running(t: Target, args: str) -> bool:
    out = (await t.run(["ps", "-A", "-o", "stat=", "-o", "args="])).stdout
    return any(line.split(None, 1)[1:] == [args] and not line.startswith("Z") for line in out.splitlines())


async def _contains(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


async def _not(aw: Awaitable[bool]) -> bool:
    return not await aw


# --- LocalTarget ----------------------------------------------------------------------------------


@pytest.fixture
def local() -> LocalTarget:
    t = open_target("local")
    assert isinstance(t, LocalTarget) and isinstance(t, Target) and t.is_local and t.name == "local"
    return t


async def test_run_basics(local, tmp_path):
    await check_run_basics(local, tmp_path)


async def test_quote_safety(local, tmp_path):
    await check_quote_safety(local, tmp_path, Path.cwd())


async def test_spawn_and_kill_group(local, tmp_path):
    await check_spawn_kill_group(local, tmp_path)


async def test_kill_escalates_to_sigkill(local, tmp_path):
    await check_kill_escalates(local, tmp_path)


async def test_spawn_errors(local, tmp_path):
    await check_spawn_errors(local, tmp_path)


async def test_tail(local, tmp_path):
    await check_tail(local, tmp_path)


async def test_files(local, tmp_path):
    await check_files(local, tmp_path)


async def test_forward_is_identity(local):
    assert await local.forward("10.1.2.3", 30000) == ("10.1.2.3", 30000)


async def test_makedirs_private_expands_home(local, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert await local.makedirs_private("~/runs/x") == str(tmp_path / "runs" / "x")


async def test_zombie_group_is_not_alive(local):
    """kill(-pgid, 0) succeeds on an unreaped zombie; alive() must still say the group is gone."""
    proc = subprocess.Popen(["true"], start_new_session=True)
    try:
        await eventually(lambda: _is_zombie(proc.pid), "the child to become a zombie")
        os.killpg(proc.pid, 0)  # the group still "exists" for kill
        assert not await local.alive(proc.pid)
        assert await local.kill_group(proc.pid)
    finally:
        proc.wait()


async def _is_zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def test_free_port_local(local):
    port = await free_port(local)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


async def test_free_port_without_python_reads_proc_net(local, tmp_path):
    """The no-python3 branch of the target script: /proc/net/tcp is parsed and listening ports avoided."""
    (tmp_path / "cat").symlink_to("/bin/cat")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        used_port = listener.getsockname()[1]
        res = await local.run(["/bin/sh", "-c", FREE_PORT_SH], env={"PATH": str(tmp_path)})
        assert res.stdout.startswith("PROCNET\n")
        assert used_port in ports_in_use(res.stdout)
        assert parse_free_port(res.stdout) not in ports_in_use(res.stdout)
        with pytest.raises(HarnessError, match="no free port"):
            parse_free_port(res.stdout, lo=used_port, hi=used_port + 1)


def test_parse_free_port_picks_the_unused_port():
    lines = [
        f"{i}: 0100007F:{port:04X} 00000000:0000 0A" for i, port in enumerate((20000, 20001, 20002, 20004))
    ]
    text = "PROCNET\n  sl  local_address rem_address   st\n" + "\n".join(lines) + "\n"
    assert ports_in_use(text) == {20000, 20001, 20002, 20004}
    assert parse_free_port(text, lo=20000, hi=20005, rng=random.Random(1)) == 20003


def test_parse_free_port_python_branch():
    assert parse_free_port("41234\n") == 41234
    with pytest.raises(HarnessError, match="cannot find a free port"):
        parse_free_port("sh: 1: python3: Permission denied\n")


def test_group_alive_in_ignores_zombies_and_other_groups():
    ps = "  100 Ss\n  100 Z\n  200 S\n 1000 R+\n"
    assert group_alive_in(ps, 100)
    assert not group_alive_in("  100 Z\n  1000 S\n", 100)
    assert not group_alive_in(ps, 10)


def test_command_line_is_shlex_join_without_env_or_cwd():
    assert command_line(["echo", "a b", "$(x)"]) == shlex.join(["echo", "a b", "$(x)"])
    with pytest.raises(HarnessError):
        command_line([])


async def test_command_line_through_a_real_shell(tmp_path, monkeypatch):
    """What the SSH target sends, run by a local sh: argv, env and a `~/` cwd survive intact."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "w d").mkdir()
    line = command_line([*ARGV_DUMP, *NASTY], env={"DB_Y": "$(touch CANARY8)"}, cwd="~/w d")
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", line + '; echo "$DB_Y"', cwd=tmp_path, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert json.loads(out.decode().splitlines()[0]) == NASTY
    line = command_line(["sh", "-c", 'pwd; echo "$DB_Y"'], env={"DB_Y": "$(touch CANARY8)"}, cwd="~/w d")
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.splitlines() == [str(tmp_path / "w d"), "$(touch CANARY8)"]
    assert list(tmp_path.rglob("CANARY*")) == []


def test_quote_path_expands_only_a_leading_home_tilde(tmp_path):
    cases = {
        "~": str(tmp_path),
        "~/a b": f"{tmp_path}/a b",
        "/x/~y": "/x/~y",
        "~root/x": "~root/x",
        "a'$b": "a'$b",
    }
    script = "; ".join(f"printf '%s\\n' {quote_path(p)}" for p in cases)
    out = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env={"HOME": str(tmp_path)}
    ).stdout
    assert out.splitlines() == list(cases.values())


def test_open_target_ssh_destination_does_not_connect():
    t = open_target("someone@gpu-node-1", ssh_port=2222)
    assert isinstance(t, Target) and not t.is_local and t.name == "someone@gpu-node-1"


async def test_local_signal_to_dead_group_is_harmless(local):
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    assert not await local.alive(proc.pid)
    await local._signal_group(proc.pid, signal.SIGTERM)


async def test_write_private_makes_the_file_0600(tmp_path):
    from harness.targets.local import LocalTarget

    path = tmp_path / "secret.env"
    path.write_text("old")
    path.chmod(0o644)
    await LocalTarget().write_private(str(path), b"VLLM_API_KEY=x\n")
    assert path.read_bytes() == b"VLLM_API_KEY=x\n" and (path.stat().st_mode & 0o777) == 0o600
