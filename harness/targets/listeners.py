"""Who listens on a port of the target: so that a readiness probe answered by another process is not taken
for the server draftbench started.

`free_port` finds a port free when checked, and the server binds it later: SGLang after loading the model,
minutes on a large one. Another process (a second draftbench session on the node, anyone's server) can take
the port in between; then /health answers, from the wrong server, while ours fails to bind, and every number
would be that other server's. Linux only: /proc/net/tcp{,6} give the listening socket's inode, and the
/proc/PID/fd links that point at it give its processes and their process groups. Where /proc cannot say
(no listener yet, another user's processes), the answer is "unknown" and readiness is not held back."""

from __future__ import annotations

from dataclasses import dataclass

from harness.targets.base import Target

# PORT in argv[1]: "none" when nothing listens on it, else one "PID PGRP" line per process holding the
# listening socket that /proc lets us see (possibly none: another user's).
LISTENERS_SH = r"""
hex=$(printf '%04X' "$1")
inodes=$(awk -v p="$hex" 'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); if (a[n] == p) print $10 }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
[ -n "$inodes" ] || { echo none; exit 0; }
for ino in $inodes; do
  find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\[$ino\]" 2>/dev/null
done | awk -F/ '{ print $3 }' | sort -u | while read -r pid; do
  sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk -v pid="$pid" '{ print pid, $3 }'
done
"""


@dataclass(frozen=True)
class Listeners:
    """What /proc says of a port: nobody listens, or these (pid, process group) pairs hold its socket."""

    none: bool
    holders: tuple[tuple[int, int], ...]

    def foreign_to(self, pgid: int) -> tuple[int, int] | None:
        """A holder outside process group `pgid`, when every holder /proc shows is outside it."""
        if self.none or not self.holders or any(g == pgid for _, g in self.holders):
            return None
        return self.holders[0]


def parse_listeners(output: str) -> Listeners | None:
    text = output.strip()
    if text == "none":
        return Listeners(True, ())
    pairs = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            return None
        pairs.append((int(fields[0]), int(fields[1])))
    return Listeners(False, tuple(pairs))


async def port_listeners(target: Target, port: int) -> Listeners | None:
    """Who listens on `port` of the target; None when it cannot be told (no /proc, a failed command)."""
    try:
        res = await target.run(["sh", "-c", LISTENERS_SH, "sh", str(int(port))], timeout=30)
    except Exception:  # noqa: BLE001 - a check that cannot run leaves readiness as it was
        return None
    return parse_listeners(res.stdout) if res.rc == 0 else None
