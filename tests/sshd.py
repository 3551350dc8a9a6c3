"""A real OpenSSH sshd on 127.0.0.1 for tests: generated keys, key auth only, a known_hosts file and an
ssh_config with a Host alias. `kill_connections()` drops every live SSH connection (the listener stays up).

Use `start_sshd(workdir)` directly, or the session-scoped `sshd_server` fixture (import it into conftest).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
ALIAS = "draftbench-test"
# Names the per-connection sshd processes carry (sshd-session / sshd-auth since OpenSSH 9.8).
_SESSION_COMMS = {"sshd", "sshd-session", "sshd-auth"}


def sshd_missing_reason() -> str | None:
    """Why a real sshd cannot be started here, or None when it can."""
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} not installed (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not installed"
    return None


@dataclass
class SSHDServer:
    host: str
    port: int
    user: str
    client_key: str  # private key path (public key next to it, .pub)
    known_hosts: str  # has the server's host key for [host]:port
    ssh_config: str  # contains `Host <alias>` with HostName/Port/User/IdentityFile/UserKnownHostsFile
    alias: str
    host_fingerprint: str  # "SHA256:..." as `ssh-keygen -l -E sha256` prints it
    home: Path  # HOME of remote sessions (SetEnv), so the real user's shell rc files are not read
    workdir: Path
    proc: subprocess.Popen = field(repr=False)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}"

    def session_pids(self) -> list[int]:
        """sshd processes below the listener (one or two per live connection), not the user's commands."""
        children: dict[int, list[int]] = {}
        comms: dict[int, str] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] == "Z":
                continue
            pid, ppid = int(entry), int(fields[1])
            comms[pid] = comm
            children.setdefault(ppid, []).append(pid)
        found: list[int] = []
        todo = list(children.get(self.proc.pid, []))
        while todo:
            pid = todo.pop()
            if comms.get(pid) in _SESSION_COMMS:
                found.append(pid)
                todo.extend(children.get(pid, []))
        return found

    def kill_connections(self, timeout: float = 10.0) -> int:
        """SIGKILL the processes serving current connections (a dropped link); returns how many were
        killed."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while set(pids) & set(self.session_pids()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd session processes {pids} did not exit")
            time.sleep(0.01)
        return len(pids)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_banner(proc: subprocess.Popen, port: int, log: Path, timeout: float = 15.0) -> bool:
    """True once sshd answers with its banner; False if it exited (port taken, bad config)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"sshd on port {port} not ready after {timeout}s: {log.read_text()[-2000:]}")


def start_sshd(workdir: Path, alias: str = ALIAS) -> SSHDServer:
    """Start sshd in the foreground on a free loopback port, with everything it needs under `workdir`."""
    reason = sshd_missing_reason()
    if reason:
        raise RuntimeError(reason)
    workdir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.makedirs(
            "/run/sshd", mode=0o755, exist_ok=True
        )  # privilege-separation dir sshd insists on as root
    host_key, client_key = workdir / "host_ed25519", workdir / "client_ed25519"
    _keygen(host_key, "draftbench-test-host")
    _keygen(client_key, "draftbench-test-client")
    (workdir / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    fp = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{host_key}.pub"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    user = getpass.getuser()
    # a hermetic home: the remote login shell finds no rc files of the real user (faster, reproducible)
    home = workdir / "home"
    home.mkdir()
    log = workdir / "sshd.log"
    for _attempt in range(5):
        port = _unused_port()
        config = workdir / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {workdir}/sshd.pid\n"
            f"AuthorizedKeysFile {workdir}/authorized_keys\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
            "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nLogLevel ERROR\n"
            f"SetEnv HOME={home}\n"
        )
        with open(log, "ab") as log_f:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=log_f, stderr=log_f
            )
        if _wait_banner(proc, port, log):
            break
    else:
        raise RuntimeError(f"sshd did not start: {log.read_text()[-2000:]}")
    pub = Path(f"{host_key}.pub").read_text().split()
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    ssh_config = workdir / "ssh_config"
    ssh_config.write_text(
        f"Host {alias}\n    HostName 127.0.0.1\n    Port {port}\n    User {user}\n"
        f"    IdentityFile {client_key}\n    UserKnownHostsFile {known_hosts}\n"
    )
    return SSHDServer(
        host="127.0.0.1",
        port=port,
        user=user,
        client_key=str(client_key),
        known_hosts=str(known_hosts),
        ssh_config=str(ssh_config),
        alias=alias,
        host_fingerprint=fp,
        home=home,
        workdir=workdir,
        proc=proc,
    )


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory):
    """One sshd for the whole session; skips when sshd is not installed."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
