"""SSHTarget against a real OpenSSH sshd on 127.0.0.1 (one per module), including dropped links."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from harness.common.errors import HarnessError
from harness.targets import open_target
from harness.targets.base import free_port
from harness.targets.ssh import SSHTarget
from tests.sshd import SSHDServer, sshd_missing_reason, start_sshd
from tests.test_target_local import (
    check_files,
    check_kill_escalates,
    check_quote_safety,
    check_run_basics,
    check_spawn_errors,
    check_spawn_kill_group,
    check_tail,
    eventually,
    next_block,
)

pytestmark = [
    pytest.mark.ssh,
    pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or ""),
]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> SSHDServer:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def _target(sshd: SSHDServer, **overrides) -> SSHTarget:
    kwargs = dict(
        ssh_port=sshd.port,
        known_hosts=sshd.known_hosts,
        client_keys=[sshd.client_key],
        config=[sshd.ssh_config],
    )
    kwargs.update(overrides)
    t = open_target(sshd.destination, **kwargs)
    assert isinstance(t, SSHTarget)
    return t


@pytest.fixture
async def target(sshd):
    t = _target(sshd)
    await t.connect()
    yield t
    await t.close()


async def test_run_basics(target, tmp_path):
    await check_run_basics(target, tmp_path)


async def test_quote_safety(sshd, target, tmp_path):
    await check_quote_safety(target, tmp_path, sshd.home)


async def test_spawn_and_kill_group(target, tmp_path):
    await check_spawn_kill_group(target, tmp_path)


async def test_kill_escalates_to_sigkill(target, tmp_path):
    await check_kill_escalates(target, tmp_path)


async def test_spawn_errors(target, tmp_path):
    await check_spawn_errors(target, tmp_path)


async def test_tail(target, tmp_path):
    await check_tail(target, tmp_path)


async def test_files(target, tmp_path):
    await check_files(target, tmp_path)


async def test_spawned_process_survives_dropped_link(sshd, target, tmp_path):
    log, go = tmp_path / "srv.log", tmp_path / "go"
    argv = ["sh", "-c", f"echo before; while [ ! -e '{go}' ]; do sleep 0.05; done; echo after; sleep 300"]
    pgid = await target.spawn(
        argv, env={}, cwd=str(tmp_path), log_path=str(log), pid_path=str(tmp_path / "p")
    )
    assert sshd.kill_connections() >= 1
    go.touch()
    assert await target.alive(pgid)  # reconnects transparently
    assert target.reconnects == 1
    await eventually(lambda: _has_line(log, "after"), "the spawned process to keep running after the drop")
    assert log.read_text() == "before\nafter\n"
    assert await target.kill_group(pgid)


async def _has_line(path: Path, line: str) -> bool:
    return line in path.read_text().splitlines()


async def test_run_after_dropped_link(sshd, target):
    assert sshd.kill_connections() >= 1
    res = await target.run(["echo", "still here"])
    assert res.stdout == "still here\n"
    assert target.reconnects == 1


async def test_tail_resumes_across_dropped_links(sshd, target, tmp_path):
    path = tmp_path / "server.log"
    path.write_bytes(b"line 0\n")
    it = target.tail(str(path))
    got = await next_block(it)
    for drop in (1, 2):
        chunk = b"".join(b"drop %d line %d\n" % (drop, i) for i in range(20000))  # many reads' worth
        if drop == 1:  # appended while the tail is streaming: some bytes are in flight when the link dies
            with path.open("ab") as f:
                f.write(chunk)
            got += await next_block(it)
            assert sshd.kill_connections() >= 1
        else:  # appended while the link is down
            assert sshd.kill_connections() >= 1
            with path.open("ab") as f:
                f.write(chunk)
        with path.open("ab") as f:  # something to read after the drop, so the tail has to reconnect
            f.write(b"after drop %d\n" % drop)
        while len(got) < path.stat().st_size:
            got += await next_block(it)
    assert got == path.read_bytes()
    assert target.reconnects == 2
    await it.aclose()


async def test_closing_a_tail_ends_the_remote_tail(target, tmp_path):
    path = tmp_path / "unique-name-for-ps.log"
    path.write_bytes(b"x\n")
    it = target.tail(str(path))
    assert await next_block(it) == b"x\n"
    assert await _tail_running(target, path)
    await it.aclose()
    await eventually(lambda: _not_running(target, path), "the remote tail to exit")


async def _tail_running(target: SSHTarget, path: Path) -> bool:
    res = await target.run(["ps", "-A", "-o", "stat=", "-o", "args="])
    return any(str(path) in line and not line.startswith("Z") for line in res.stdout.splitlines())


async def _not_running(target: SSHTarget, path: Path) -> bool:
    return not await _tail_running(target, path)


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    data = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return data


async def test_forward_survives_dropped_link(sshd, target):
    server, port = await _echo_server()
    async with server:
        host, local_port = await target.forward("127.0.0.1", port)
        assert host == "127.0.0.1" and local_port != port
        payload = b"hello " * 50000
        assert await _roundtrip(local_port, payload) == payload.upper()
        assert sshd.kill_connections() >= 1
        assert await _roundtrip(local_port, b"again") == b"AGAIN"  # same local port, new SSH connection
        assert target.reconnects == 1


async def test_forward_relays_each_chunk_as_it_arrives(target):
    """Streaming (SSE) needs every chunk passed on at once: the server sends its second chunk only after
    the client has seen the first, so a relay that buffers would deadlock here."""
    seen_first = asyncio.Event()

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"data: first\n\n")
        await writer.drain()
        await seen_first.wait()
        writer.write(b"data: second\n\n")
        writer.close()

    server = await asyncio.start_server(stream, "127.0.0.1", 0)
    async with server:
        _, local_port = await target.forward("127.0.0.1", server.sockets[0].getsockname()[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", local_port)
        assert await asyncio.wait_for(reader.readuntil(b"\n\n"), 20) == b"data: first\n\n"
        seen_first.set()
        assert await asyncio.wait_for(reader.read(), 20) == b"data: second\n\n"
        writer.close()


async def test_forward_to_closed_port_gives_eof(target):
    with_closed = await free_port(target)
    _, local_port = await target.forward("127.0.0.1", with_closed)
    assert await _roundtrip(local_port, b"anyone?") == b""


async def test_close_stops_forwards(sshd):
    t = _target(sshd)
    server, port = await _echo_server()
    async with server:
        _, local_port = await t.forward("127.0.0.1", port)
        await t.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", local_port)


async def test_free_port_on_target(target):
    port = await free_port(target)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
    server.close()


async def test_unknown_host_key_is_refused_with_fingerprint(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = _target(sshd, known_hosts=str(empty))
    with pytest.raises(HarnessError) as err:
        await t.connect()
    msg = str(err.value)
    assert sshd.host_fingerprint in msg
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> ~/.ssh/known_hosts" in msg
    assert "\n" not in msg


async def test_a_changed_host_key_is_not_offered_for_blind_trust(sshd, tmp_path):
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")  # a key for this host, not the one it offers
    t = _target(sshd, known_hosts=str(known))
    with pytest.raises(HarnessError) as err:
        await t.connect()
    msg = str(err.value)
    assert "CHANGED" in msg and sshd.host_fingerprint in msg and "ssh-keyscan" not in msg
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}'" in msg and "\n" not in msg


async def test_known_hosts_none_in_config_does_not_disable_checking(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/known_hosts to fall back on
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host loose\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile none\n  StrictHostKeyChecking no\n"
    )
    t = open_target("loose", config=[str(config)])
    with pytest.raises(HarnessError, match=re.escape(sshd.host_fingerprint)):
        await t.connect()


async def test_ssh_config_alias_is_honoured(sshd):
    t = open_target(sshd.alias, config=[sshd.ssh_config])  # port, user, key and known_hosts from the config
    try:
        res = await t.run(["sh", "-c", 'echo "$USER $SSH_CONNECTION"'])
        user, _client_ip, _client_port, server_ip, server_port = res.stdout.split()
        assert (user, server_ip, int(server_port)) == (sshd.user, "127.0.0.1", sshd.port)
    finally:
        await t.close()


async def test_proxyjump_from_config_is_honoured(sshd, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        Path(sshd.ssh_config).read_text()
        + f"Host via-jump\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.client_key}\n    UserKnownHostsFile {sshd.known_hosts}\n"
        f"    ProxyJump {sshd.alias}\n"
    )
    before = set(sshd.session_pids())
    t = open_target("via-jump", config=[str(config)])
    try:
        res = await t.run(["echo", "through the jump"])
        assert res.stdout == "through the jump\n"
        # one sshd session for the jump host, one for the final hop tunnelled through it
        assert len(set(sshd.session_pids()) - before) == 2
    finally:
        await t.close()


async def test_connect_timeout_is_one_line(sshd):
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never sends an SSH banner

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        t = SSHTarget(sshd.destination, ssh_port=port, known_hosts=sshd.known_hosts, connect_timeout=0.5)
        with pytest.raises(HarnessError, match=rf"connecting to 127.0.0.1:{port} timed out after 0.5s$"):
            await t.connect()


async def test_connection_refused_is_one_line(sshd):
    port = await free_port(open_target("local"))
    t = _target(sshd, ssh_port=port)
    with pytest.raises(
        HarnessError, match=rf"^ssh {sshd.destination}: connection refused by 127.0.0.1:{port} "
    ) as err:
        await t.connect()
    assert "\n" not in str(err.value)


async def test_unauthorized_key_fails_auth(sshd, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    t = _target(sshd, client_keys=[str(key)])
    with pytest.raises(HarnessError, match="authentication failed"):
        await t.connect()


async def test_write_private_sends_the_bytes_on_stdin_and_makes_the_file_0600(target, tmp_path):
    path = tmp_path / "secret.json"
    path.write_text("old")
    path.chmod(0o644)
    await target.write_private(str(path), b'{"api-key": "s3cret"}')
    assert path.read_bytes() == b'{"api-key": "s3cret"}' and (path.stat().st_mode & 0o777) == 0o600
