"""Errors the user can act on, and the process exit codes (defined here only)."""

from __future__ import annotations

import sys

from harness.common.terminal import clean

EXIT_OK = 0
EXIT_FAILURES = 1  # the run finished, but some requests or variants failed
EXIT_BAD_INPUT = 2  # bad plan / suite / drafter / flags / paths
EXIT_INTERRUPTED = 130

# the one table every command follows (printed by `draftbench --help`, quoted in the README)
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_FAILURES: "the command ran and something failed (a variant, requests, a job, the target)",
    EXIT_BAD_INPUT: "bad input (the message names the file, line and field) or a failed preflight",
    EXIT_INTERRUPTED: "interrupted (servers stopped, finished requests kept)",
}


def exit_code_table() -> str:
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_MEANINGS.items())


class HarnessError(Exception):
    """A failure with a message meant for the user (no traceback); `exit_code` is the process's."""

    exit_code = EXIT_FAILURES


class InputError(HarnessError):
    """Bad user input, located by file, line and field."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str | None, line: int | None, field: str | None, message: str):
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = str(self.path) if self.path else "<input>"
        if self.line:
            where += f":{self.line}"
        head = f"{where}: "
        if self.field:
            head += f"{self.field}: "
        return head + self.message


class PreflightFailed(HarnessError):
    """The preflight found errors before any server started: one line per error (the check's own words)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


def say(msg: str) -> None:
    """A diagnostic line on stderr, its control characters made visible (they may come from a server or a
    suite: harness.common.terminal). A closed terminal (SIGHUP, broken pipe) must not turn cleanup into a
    crash."""
    try:
        print(clean(msg), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
