"""SGLang's own words when it is stopped with SIGTERM (how draftbench stops a server: TERM to its process
group). The group's TERM also reaches the scheduler and detokenizer children, so the parent logs them as
crashed and goes on to crash diagnostics (../shared/gpu/captures/server-baseline.log, 0.5.15.post1):

    SIGTERM received. signum=None frame=None. Draining requests and shutting down...
    Subprocess scheduler_0 (pid=616) crashed with exit code -15. Triggering SIGQUIT for cleanup...
    SIGQUIT received. signum=None, frame=None. It usually means one child failed.
    Sleeping 5 seconds before crash diagnostics to let GPU activity settle.

After our own TERM those lines are the expected shutdown, not a crash (harness.serve.server labels them)."""

from __future__ import annotations

import re

_AFTER_TERM = re.compile(
    r"Subprocess \S+ \(pid=\d+\) crashed with exit code -15\b"
    r"|SIGQUIT received\..*It usually means one child failed"
    r"|Sleeping \d+ seconds before crash diagnostics"
)


def expected_on_stop(line: str) -> bool:
    """True for a line SGLang writes on a SIGTERM that reads like a failure."""
    return bool(_AFTER_TERM.search(line))
