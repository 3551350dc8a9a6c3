"""Events -> messages without an app: state changes go out at once and in order, the high-rate events are
folded into a few snapshots, and the live numbers are the events' own."""

from __future__ import annotations

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.feed import LOG_BATCH_MAX, EventFeed
from harness.tui.state import Alarm, ProgressModel, ServerView
from tests.snapshots.tui_fakes import log_lines, record, window


def feed() -> tuple[EventFeed, list]:
    posted: list = []
    return EventFeed(posted.append, source="run"), posted


def test_high_rate_events_wait_for_a_flush_and_fold_into_one_snapshot():
    f, posted = feed()
    f.push(ev.RunStarted("r", "/tmp/r", "p", ("a",), 500, True))
    f.push(ev.PhaseStarted("a", "s@c1#r1", "s", 1, 500))
    posted.clear()
    for i in range(500):
        f.push(ev.RequestDone(record("a", "s@c1#r1", i), i + 1, 500))
        f.push(ev.LogWindow("a", window(2.0 + i / 1000, 100.0 + i), "s@c1#r1"))
        f.push(ev.ServerLog("a", (f"line {i}",)))
    assert posted == []
    f.flush()
    assert [type(m) for m in posted] == [msg.ServerLogLines, msg.ProgressUpdated]
    assert posted[0].lines == tuple(f"line {i}" for i in range(500))
    snap = posted[1].snapshot
    assert (snap.done, snap.total, snap.phase_done, snap.phase_total) == (500, 500, 500, 500)
    assert snap.accept_len == {"a": 2.0 + 499 / 1000}
    f.flush()
    assert len(posted) == 2  # nothing new, nothing sent


def test_a_state_change_first_flushes_what_came_before_it():
    f, posted = feed()
    f.push(ev.ServerLog("a", ("before",)))
    f.push(ev.ServerState("a", "ready", 1, 2))
    f.push(ev.ServerLog("a", ("after",)))
    f.flush()
    assert [type(m) for m in posted] == [msg.ServerLogLines, msg.ServerStateChanged, msg.ServerLogLines]
    assert posted[0].lines == ("before",) and posted[2].lines == ("after",)
    assert posted[1].source == "run" and (posted[1].port, posted[1].pgid) == (1, 2)


def test_log_batches_keep_the_newest_lines():
    f, posted = feed()
    f.push(ev.ServerLog("a", tuple(str(i) for i in range(LOG_BATCH_MAX + 10))))
    f.flush()
    assert len(posted[0].lines) == LOG_BATCH_MAX and posted[0].lines[-1] == str(LOG_BATCH_MAX + 9)


def test_every_state_event_has_its_message():
    f, posted = feed()
    events = [
        ev.RunStarted("r", "/tmp/r", "p", ("a",), 1, False),
        ev.ServerState("a", "starting"),
        ev.PhaseStarted("a", "s@c1#r1", "s", 1, 1),
        ev.PhaseDone("a", "s@c1#r1", 1.0, 2.0),
        ev.Alarm("a", "error", "drafter-inert", "x"),
        ev.VariantDone("a", True),
        ev.RunDone("/tmp/r", True, 0, "/tmp/r/summary.csv"),
    ]
    for e in events:
        f.push(e)
    assert [type(m).__name__ for m in posted if not isinstance(m, msg.ProgressUpdated)] == [
        "RunLaunched",
        "ServerStateChanged",
        "PhaseBegan",
        "PhaseFinished",
        "AlarmRaised",
        "VariantFinished",
        "RunFinished",
    ]
    assert f.run_dir == "/tmp/r"


def test_live_tok_s_is_this_phases_tokens_over_its_span():
    m = ProgressModel()
    m.observe(ev.PhaseStarted("a", "p1", "s", 2, 2))
    m.observe(ev.RequestDone(record("a", "p1", 0, tokens=100), 1, 4))  # sent 10, ended 11
    m.observe(ev.RequestDone(record("a", "p1", 2, tokens=50), 2, 4))  # sent 12, ended 13
    assert m.snapshot().live_tok_s == 150 / 3.0
    m.observe(ev.PhaseStarted("b", "p2", "s", 2, 2))
    snap = m.snapshot()
    assert snap.live_tok_s is None and snap.phase_done == 0 and snap.done == 2
    m.observe(ev.RequestDone(record("a", "p1", 5), 3, 4))  # a late record of the previous phase
    assert m.snapshot().phase_done == 0


def test_windows_feed_series_only_from_decode_lines():
    from harness.engines.sglang.logparse import parse_line

    m = ProgressModel()
    for i, line in enumerate(log_lines(3)):
        w = parse_line(line, i + 1)
        if w is not None:
            m.observe(ev.LogWindow("a", w, None))
    snap = m.snapshot()
    assert snap.accept_series == {"a": (2.0, 2.25, 2.5)} and snap.tok_s_series == {"a": (100.0, 110.0, 120.0)}
    prefill = window(3.0, 1.0).__class__(line=9, time="t", kind="prefill")
    assert m.observe(ev.LogWindow("a", prefill, None)) is False


def test_server_view_uptime_counts_from_ready_and_alarms_accumulate():
    v = ServerView("a").with_state("starting", 5, 6, "", "fleet", now=1.0)
    assert v.ready_since is None
    v = v.with_state("ready", None, None, "", "fleet", now=2.0)
    assert (v.ready_since, v.port, v.pgid) == (2.0, 5, 6)
    assert v.with_state("ready", 5, 6, "", "fleet", now=9.0).ready_since == 2.0
    assert v.with_state("stopped", None, None, "", "fleet", now=9.0).ready_since is None
    a = Alarm("warning", "x", "text")
    assert v.with_alarm(a).with_alarm(a).alarms == (a,)
