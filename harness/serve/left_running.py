"""Servers a draftbench may have left running, said in one line each: the variant, the pgid, the host, and
the command that stops it. Used when a run ends without stopping them (a third Ctrl-C, a lost SSH link)
and by the next command that touches the results dir or the run after the harness was SIGKILLed.

servers.jsonl's "started" entries carry the harness's pid and host: a run whose harness is still alive on
this host is in progress, not a leftover.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any


def stop_command(target: str, pgid: int, ssh_port: int | None = None) -> str:
    kill = f"kill -TERM -- -{int(pgid)}"
    if target == "local":
        return kill
    port = ["-p", str(ssh_port)] if ssh_port and int(ssh_port) != 22 else []
    return shlex.join(["ssh", *port, target, kill])


def left_line(variant: str, pgid: int, target: str, ssh_port: int | None = None, why: str = "") -> str:
    where = "this machine" if target == "local" else target
    return (f"warning: [{variant}] its server may still be running{why}: pgid {pgid} on {where}; stop it "
            f"with `{stop_command(target, pgid, ssh_port)}`")


def _alive_here(n: int, probe: Callable[[int, int], None] = os.kill) -> bool:
    """Signal 0 to a pid (os.kill) or a process group (os.killpg) on this host: does it exist?"""
    try:
        probe(n, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _harness_gone(entry: dict[str, Any]) -> bool | None:
    """True: the harness that started it is dead; False: alive here; None: another host (cannot tell)."""
    pid, host = entry.get("harness_pid"), entry.get("harness_host")
    if not isinstance(pid, int):
        return True  # written before harness pids were recorded: nobody is left to stop it but the user
    if host != platform.node():
        return None
    return not _alive_here(pid)


def _not_stopped(path: Path) -> list[dict[str, Any]]:
    """servers.jsonl's "started" entries whose group was never stopped or kept, or whose stop failed."""
    last: dict[int, dict[str, Any]] = {}
    started: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and isinstance(entry.get("pgid"), int):
                last[entry["pgid"]] = entry
                if entry.get("state") == "started":
                    started[entry["pgid"]] = entry
    return [started[p] for p, e in last.items()
            if p in started and e.get("state") in ("started", "stop-failed")]


def run_dir_notices(run_dir: str | Path, *, ours: bool = False) -> list[str]:
    """One line per server the run started and never stopped whose harness is gone (`ours`: this process
    is that harness, and it is ending)."""
    out: list[str] = []
    path = Path(run_dir) / "servers.jsonl"
    if not path.exists():
        return out
    with contextlib.suppress(OSError):
        for entry in _not_stopped(path):
            gone = True if ours else _harness_gone(entry)
            if gone is False:
                continue  # that run is still going
            pgid, target = int(entry["pgid"]), str(entry.get("target") or "local")
            if target == "local" and not _alive_here(pgid, os.killpg):
                continue
            left_by = Path(run_dir).name
            why = "" if ours else \
                f" (left by {left_by}: its draftbench was killed before it stopped it)" if gone else \
                f" (left by {left_by}, started from {entry.get('harness_host')})"
            out.append(left_line(str(entry.get("variant", "?")), pgid, target, entry.get("ssh_port"), why))
    return out


def results_dir_notices(results_dir: str | Path, *, limit: int = 200) -> list[str]:
    """run_dir_notices over the newest `limit` run directories under a results dir."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    runs = sorted((p.parent for p in root.glob("*/servers.jsonl")), key=lambda p: p.name,
                  reverse=True)[:limit]
    return [line for run in runs for line in run_dir_notices(run)]
