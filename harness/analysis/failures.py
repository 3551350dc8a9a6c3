"""Why a variant failed, in a few words for its table row: the runner's `failure` from variants.jsonl and the
cause its server's last log lines name (`port 20994 in use`, `checkpoint not found: PATH`), instead of the
log dump the cause is buried in. The same words go to summary.csv (`failure_reason`), the CLI table, the
CLI's progress and the TUI's Results."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_PORT = re.compile(r"\[Errno (?:98|48)\].*?\('([^']*)', (\d+)\)|address already in use.*?port (\d+)")
_NO_CONFIG = re.compile(r"(?:OSError: )?(\S+) does not appear to have a file named config\.json")
_NOT_A_MODEL = re.compile(r"(?:OSError: )?(\S+) is not a local folder and is not a valid model identifier")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_ERROR = re.compile(r"^(?:\[[^\]]*\]\s*)?(?:[\w.]+(?:Error|Exception)|RuntimeError|ValueError)\b:?\s*(.*)")
_PROGRESS = re.compile(r"\d+%\|")  # tqdm bars: never the reason
MAX_CHARS = 160


def cause_from_log(lines: Iterable[str]) -> str | None:
    """The cause a server's last log lines name, in a few words; None when none is recognised."""
    text = [str(ln).strip() for ln in lines if str(ln).strip() and not _PROGRESS.search(str(ln))]
    for line in reversed(text):
        if m := _PORT.search(line):
            return f"port {m.group(2) or m.group(3)} in use"
        if m := _NO_CONFIG.search(line) or _NOT_A_MODEL.search(line):
            return f"checkpoint not found: {m.group(1).rstrip('.')}"
        if _OOM.search(line):
            return "GPU out of memory"
    for line in reversed(text):
        if _ERROR.match(line):
            return _clip(line)
    return None


def meaningful_tail(lines: Iterable[str], n: int = 8) -> list[str]:
    """The last n log lines that are not progress bars, and the shutdown note of harness.engines (kept)."""
    return [str(ln).rstrip() for ln in lines if str(ln).strip() and not _PROGRESS.search(str(ln))][-n:]


def describe_failure(failure: str, lines: Iterable[str]) -> str:
    """The cause from the log first, then what the runner saw: `port 20994 in use (exited before it became
    ready)`; the runner's words alone when the log names no cause."""
    cause = cause_from_log(lines)
    return _clip(f"{cause} ({failure})" if cause else failure)


def failure_reason(meta: dict[str, Any]) -> str | None:
    """A failed or interrupted variant's reason from its variants.jsonl entry (None for one that finished)."""
    status = str(meta.get("status") or "")
    if status in ("", "ok"):
        return None
    return describe_failure(str(meta.get("failure") or status), meta.get("last_log_lines") or [])


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."
