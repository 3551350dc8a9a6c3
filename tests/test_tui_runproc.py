"""The run's own process: framing, the end of a run in every way it can end, and no UI in that process."""

from __future__ import annotations

import subprocess
import sys
import threading

from harness.tui import messages as msg
from harness.tui.runchild import frame, resolve_call, unframe
from harness.tui.runproc import RUN_PLAN, RunProcess


def test_frames_survive_any_split():
    data = b"".join(frame(("event", i)) for i in range(50)) + frame(("end", "done", ""))
    buf = bytearray()
    got = []
    for i in range(0, len(data), 7):  # arrives in odd pieces, as pipe reads do
        buf += data[i : i + 7]
        got += unframe(buf)
    assert got == [("event", i) for i in range(50)] + [("end", "done", "")] and buf == bytearray()


def test_only_known_core_generators_can_be_called():
    from harness.bench.gate import checked_run_plan

    assert resolve_call(RUN_PLAN) is checked_run_plan  # the preflight first, as `draftbench run`
    try:
        resolve_call("os:system")
    except ValueError as exc:
        assert "not a run the TUI starts" in str(exc)
    else:
        raise AssertionError("os:system was accepted")


def test_the_run_process_loads_no_ui():
    code = (
        "import sys, harness.tui.runchild, harness.tui.state, harness.analysis.runs, harness.bench.runner\n"
        "print(','.join(m for m in sys.modules if m == 'textual' or m.startswith('textual.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def run(proc: RunProcess, posted: list) -> None:
    t = threading.Thread(target=proc.run)
    t.start()
    t.join(60)
    assert not t.is_alive()


def test_a_crash_in_the_run_process_is_reported_with_its_reason():
    posted: list = []
    proc = RunProcess(RUN_PLAN, (None,), {"results_dir": "/nonexistent"}, post=posted.append)
    run(proc, posted)
    assert [type(m) for m in posted] == [msg.RunCrashed]
    assert "AttributeError" in posted[0].error and posted[0].run_dir is None


def test_a_run_that_cannot_be_handed_over_says_why():
    posted: list = []
    proc = RunProcess(RUN_PLAN, (lambda: None,), {}, post=posted.append)
    run(proc, posted)
    assert [type(m) for m in posted] == [msg.RunCrashed] and "cannot hand the run" in posted[0].error


def test_cancel_before_the_process_started_ends_as_cancelled():
    posted: list = []
    proc = RunProcess(RUN_PLAN, (None,), {}, post=posted.append)
    proc.cancel()
    run(proc, posted)
    assert [type(m) for m in posted] == [msg.RunCancelled]
