"""Errors the user can act on, and the process exit codes (defined here only)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURES = 1  # the run finished, but some requests or variants failed
EXIT_BAD_INPUT = 2  # bad plan / suite / drafter / flags / paths
EXIT_INTERRUPTED = 130


class HarnessError(Exception):
    """A failure with a message meant for the user (no traceback)."""


class InputError(HarnessError):
    """Bad user input, located by file, line and field."""

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


def say(msg: str) -> None:
    """A diagnostic line on stderr, its control characters made visible (they may come from a server or a
    suite: harness.common.terminal). A closed terminal (SIGHUP, broken pipe) must not turn cleanup into a crash."""
    import sys

    from harness.common.terminal import clean

    try:
        print(clean(msg), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
