"""Terminal injection: bytes from a server or a suite (prompt ids, error bodies, log lines) reach neither the
CLI's terminal nor the TUI as control sequences, and the TUI never reads such text as markup."""

from __future__ import annotations

import io

from harness.analysis.records import RequestRecord
from harness.cli.progress import consume
from harness.common import events as ev
from harness.common.terminal import clean
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.snapshots.tui_fakes import DRAFTERS, PLAN_PATH, FakeFleet, snap_plan, wait_for

SET_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
HOSTILE = f"id{SET_TITLE}{CLEAR}{C1_CSI}\r\x00\u202eend"


def test_clean_makes_every_control_visible():
    out = clean(HOSTILE)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in out)
    assert out == "id\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x9b31m\\x0d\\x00\\u202eend"
    assert clean("a\tb\nc") == "a\tb\nc" and clean("a\nb", one_line=True) == "a\\x0ab"


def _record(prompt_id: str, error: str) -> RequestRecord:
    from harness.analysis.records import RECORD_COLUMNS

    values = dict.fromkeys(RECORD_COLUMNS)
    values.update(run_id="r", variant="v", phase="p", suite="s", prompt_id=prompt_id, category="",
                  concurrency=1, repeat=1, request_id="s/x", ok=False, error=error, attempts=1, wall_send=0.0,
                  t_send=0.0, t_end=0.0, e2e_ms=0.0, chunks=0, chunk_tokens_exact=False, finish_reason="",
                  spec_source="", text_sha="", chunk_offsets_ms="", chunk_tokens="", turn=1,
                  conversation_id="", reasoning_chars=0)
    return RequestRecord(**values)


async def test_cli_progress_prints_no_control_sequences(capfd):
    async def events():
        yield ev.RunStarted("r", "/tmp/x", "p", ("v",), 1, True)
        yield ev.ServerState("v", "failed", 1, 2, f"log line {SET_TITLE}\nnext {CLEAR}")
        yield ev.RequestDone(_record(HOSTILE, f"http 500: {CLEAR}body"), 1, 1)
        yield ev.Alarm("v", "error", "code", f"server said {C1_CSI}")

    await consume(events(), out=io.StringIO())
    err = capfd.readouterr().err
    assert "\x1b" not in err and "\x9b" not in err and "\x07" not in err and "\r" not in err
    assert "\\x1b]0;pwned\\x07" in err and "\\x1b[2J" in err  # still there to read, as text


class Quiet(FakeFleet):
    pass


async def test_tui_shows_a_markup_like_log_line_and_escapes_without_crashing(tmp_path):
    app = build_app(str(PLAN_PATH), tmp_path / "results", plan=snap_plan(),
                    fleet_factory=lambda plan, *, on_event, results_dir: Quiet(
                        plan, on_event=on_event, results_dir=results_dir, alarms=False),
                    gpu_poll_s=0, drafter_dirs=[DRAFTERS], flush_interval=0.05)
    line = "Loading weights from [/models/x] done [bold]"
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.post_message(msg.ServerLogLines("baseline", (line, f"title {SET_TITLE}{CLEAR}")))
        app.post_message(msg.ServerStateChanged("baseline", "failed", 1, 2, f"{line}\nmore", "run"))
        app.post_message(msg.AlarmRaised("", "error", "bad[/x]", f"{line} {C1_CSI}"))
        await wait_for(pilot, lambda: len(app._notifications) >= 2, "the notifications")
        await pilot.press("1")  # the Servers section paints the failed detail and the log; toasts painted
        for _ in range(3):
            await pilot.pause()
        texts = [n.message for n in app._notifications]
        assert any("[/models/x]" in t for t in texts)  # shown as written, not read as markup
        assert all("\x1b" not in t and "\x9b" not in t for t in texts)
        assert list(app.log_buffers["baseline"]) == [line, "title \\x1b]0;pwned\\x07\\x1b[2J\\x1b[H"]
    assert app.return_code in (None, 0)  # no MarkupError ended the app


async def test_tui_notification_of_a_markup_like_log_line_does_not_crash(tmp_path):
    """The failed-server toast quotes the first log line: `[/models/x]` read as markup raised MarkupError."""
    app = build_app(str(PLAN_PATH), tmp_path / "results", plan=snap_plan(),
                    fleet_factory=lambda plan, *, on_event, results_dir: Quiet(
                        plan, on_event=on_event, results_dir=results_dir, alarms=False),
                    gpu_poll_s=0, drafter_dirs=[DRAFTERS], flush_interval=0.05)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.post_message(msg.ServerStateChanged("baseline", "failed", 1, 2, "OSError: [/models/x] missing",
                                                "run"))
        await wait_for(pilot, lambda: app._notifications, "the notification")
        for _ in range(3):
            await pilot.pause()
        toasts = [str(t.render()) for t in app.screen.query("Toast")]
        assert any("[/models/x]" in t for t in toasts), toasts


async def test_tui_table_cells_are_plain_text(tmp_path):
    """A results or server table cell from a suite or a server (`[/x]`, escapes) is shown as written."""
    from textual.app import App

    from harness.tui.widgets.table import Table

    class One(App):
        def compose(self):
            yield Table(id="t")

    app = One()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(Table)
        table.add_column("category", key="c")
        table.add_row("[/models/x] code", key="r")
        table.update_cell("r", "c", f"[/y]{CLEAR}")
        for _ in range(3):
            await pilot.pause()
        shown = "".join(seg.text for line in table.render_lines(table.region) for seg in line)
        assert "[/y]\\x1b[2J" in shown


async def test_tui_report_and_status_text_show_no_escapes(tmp_path):
    from harness.tui.dialogs import ReportScreen

    app = build_app(str(PLAN_PATH), tmp_path / "results", plan=snap_plan(),
                    fleet_factory=lambda plan, *, on_event, results_dir: Quiet(
                        plan, on_event=on_event, results_dir=results_dir, alarms=False),
                    gpu_poll_s=0, drafter_dirs=[DRAFTERS], flush_interval=0.05, section="run")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.screen._show_status(f"every variant failed: {SET_TITLE}")
        await pilot.pause()
        assert "\x1b" not in str(app.screen.query_one("#run-status").render())
        app.push_screen(ReportScreen("check", f"finding {CLEAR} [/x]"))
        await pilot.pause()
        shown = str(app.screen.query_one("#report-text").render())
        assert "\x1b" not in shown and "\\x1b[2J" in shown and "[/x]" in shown
