"""Where the engine runs: this machine (`LocalTarget`) or a node reached over SSH (`SSHTarget`).

Everything that reaches a shell is built from argv lists with `shlex.quote` (`base.py`), so local and remote
targets share one spawn wrapper and one process-group check. The target needs only POSIX sh and the usual
Linux tools (`setsid`, `ps`, `kill`, `tail`, `timeout`); nothing of draftbench is installed there.
"""

from __future__ import annotations

from harness.targets.base import Target
from harness.targets.local import LocalTarget


def open_target(
    destination: str,
    *,
    ssh_port: int | None = None,
    known_hosts: str | None = None,
    client_keys: list[str] | None = None,
    config: list[str] | None = None,
) -> Target:
    """This machine for "local"; anything else is an ssh destination (`host`, `user@host`, a config alias)."""
    if destination == "local":
        return LocalTarget()
    from harness.targets.ssh import SSHTarget  # asyncssh only loads for remote targets

    return SSHTarget(
        destination, ssh_port=ssh_port, known_hosts=known_hosts, client_keys=client_keys, config=config
    )
