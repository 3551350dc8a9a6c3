"""Issue 27, point 9: the TUI at 80x24 and at 160x45. Every test runs at both sizes and reads what the
terminal shows as plain text (no colour): footers whole, the Servers table's alarms and the Results columns
reached by keyboard, the Run and Tune forms' Start in view, the preflight as a table, one Quit in the palette,
check boxes that differ without colour, stopped rows without port and pgid, every tab and sub-tab by keyboard,
and the README, `?` help and on-screen hints naming the same keys."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from textual.widgets import Button, TabbedContent
from textual.widgets._footer import FooterKey

from harness.common.findings import Finding
from harness.tui import messages as msg
from harness.tui.app import SECTIONS, key_sections
from harness.tui.dialogs import FindingsScreen, HelpScreen, readme_keys
from harness.tui.screens.results import ResultsScreen
from harness.tui.widgets.server_table import alarm_summary
from tests.snapshots.tui_fakes import RESULTS, screen_text, wait_for
from tests.test_tui_app import make_app

SIZES = [(80, 24), (160, 45)]
ROOT = Path(__file__).resolve().parent.parent


def lines(app) -> list[str]:
    return screen_text(app).splitlines()


def footer_line(app) -> str:
    return lines(app)[-1]


async def settle(pilot) -> None:
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


@pytest.fixture(params=SIZES, ids=["80x24", "160x45"])
def size(request):
    return request.param


@pytest.fixture
def results(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "results")  # runs to open (and to export into)
    return tmp_path / "results"


async def test_every_footer_shows_its_keys_whole(tmp_path, size):
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        for key, (name, _, cls) in enumerate(SECTIONS, start=1):
            await pilot.press(str(key))
            await wait_for(pilot, lambda n=name: app.screen is app.get_screen(n), f"section {name}")
            await settle(pilot)
            shown = [k for k in app.screen.query(FooterKey) if k.description]
            line = footer_line(app)
            assert shown and len(line.rstrip()) <= size[0]
            for k in shown:  # nothing cut ("f Decode filte" at 80x24 before)
                assert f"{k.key_display} {k.description}" in line, (name, line)
            texts = {k.description for k in shown}
            assert {"Help", "Quit", "palette"} <= texts, line
            own = [b.description for b in cls.BINDINGS if b.show]
            if size[0] >= 160:  # room for all of them
                assert set(own) <= texts, line
            else:  # the section's first keys stay; the rest are in `?` help and the palette
                kept = [d for d in own if d in texts]
                assert kept and kept == own[: len(kept)], line


async def test_the_alarm_column_is_reached_by_keyboard(tmp_path, size):
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.servers.get("weak-eagle3") and app.servers["weak-eagle3"].alarms,
                       "the plan's alarm on weak-eagle3")
        # the demo's row at 80x24 read "warning: cuda-graph-d": a warning as long, and a second alarm
        app.post_message(msg.AlarmRaised("weak-eagle3", "warning", "cuda-graph-disabled",
                                         "CUDA graphs are off"))
        await wait_for(pilot, lambda: len(app.servers["weak-eagle3"].alarms) == 2, "both alarms")
        await settle(pilot)
        alarm = alarm_summary(app.servers["weak-eagle3"])
        assert alarm == "warning: many-draft-tokens +1"
        row = lambda: next(ln for ln in lines(app) if "weak-eagle3" in ln)  # noqa: E731
        for _ in range(8):  # right scrolls a whole column; the variant stays put
            if alarm in row():
                break
            await pilot.press("right")
            await settle(pilot)
        assert alarm in row() and "weak-eagle3" in row()
        if size[0] >= 160:
            assert "port" in lines(app)[3] and "pgid" in lines(app)[3]  # and everything else at once


async def test_results_columns_after_decode_tok_s_are_reached_by_keyboard(tmp_path, results, size):
    app, _ = make_app(tmp_path, section="results")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        table = app.screen.query_one("#results-table")
        table.focus()
        await settle(pilot)
        labels = [str(c.label) for c in table.ordered_columns]
        after = labels[labels.index("decode tok/s") + 1:]
        assert after and "note" in after
        seen: set[str] = set()
        header = lambda: lines(app)[table.region.y]  # noqa: E731
        for _ in range(len(labels) + 2):
            seen |= {lbl for lbl in labels if lbl in header()}
            assert "variant" in header()  # the fixed column stays while the rest scroll
            await pilot.press("right")
            await settle(pilot)
        assert set(after) <= seen, (after, seen)
        for _ in range(len(labels) + 2):  # and back to the first columns
            await pilot.press("left")
        await settle(pilot)
        assert "conc" in header()


async def test_run_and_tune_forms_show_start(tmp_path, size):
    app, _ = make_app(tmp_path, section="run")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        for section, button in (("run", "#start-run"), ("tune", "#start-tune")):
            await pilot.press({"run": "2", "tune": "5"}[section])
            await settle(pilot)
            start = app.screen.query_one(button, Button)
            screen = app.screen.region
            assert screen.contains_region(start.region) and start.region.y < screen.height - 1, section
            assert any(re.search(r"\bStart\b.*\bCancel\b", ln) for ln in lines(app)), section


async def test_preflight_findings_render_as_a_table(tmp_path, size):
    long_why = "decode and verify steps run eagerly: " + "each step takes longer than with graphs, " * 4
    found = (
        Finding("warning", "seed-weak-eagle3", "CUDA graphs disabled (--disable-cuda-graph)", long_why,
                "drop cuda_graph: false", "cuda-graph-disabled"),
        Finding("info", "wrong-flag-eagle", "EAGLE3 drafter served with --speculative-algorithm EAGLE",
                "expected by the plan", "", "eagle3-drafter-with-eagle"),
        Finding("error", "", "port 30000 is in use", "the server cannot bind", "free it", "port-in-use"),
    )
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.push_screen(FindingsScreen("draftbench check: 1 error(s)", found))
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen), "the findings")
        await settle(pilot)
        shown = lines(app)
        for f in found:  # one row each: severity, variant and the start of what on one line
            assert any(f.severity in ln and (f.variant or "(plan)") in ln and f.what[:12] in ln
                       for ln in shown)
        assert not any(long_why[:30] in ln
                       for ln in shown[:shown.index(next(ln for ln in shown if "port 30000" in ln))])
        detail = str(app.screen.query_one("#finding-detail").render())
        assert "why: decode and verify" in detail and "fix: drop cuda_graph" in detail
        await pilot.press("down")
        await settle(pilot)
        assert "expected by the plan" in str(app.screen.query_one("#finding-detail").render())


async def test_quit_is_once_in_the_palette(tmp_path, size):
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        assert [c.title for c in app.get_system_commands(app.screen)].count("Quit") == 1
        await pilot.press("ctrl+p")
        await settle(pilot)
        for ch in "quit":
            await pilot.press(ch)
        await wait_for(pilot, lambda: "Quit" in screen_text(app), "the palette's matches")
        await settle(pilot)
        assert sum(1 for ln in lines(app) if ln.strip() == "Quit") == 1, screen_text(app)
        await pilot.press("escape")


async def test_ticked_and_unticked_boxes_differ_without_colour(tmp_path, size):
    app, _ = make_app(tmp_path, section="run")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        picks = app.screen.query_one("#pick-suites")
        await wait_for(pilot, lambda: picks.option_count >= 3, "suites offered")
        await settle(pilot)
        text = screen_text(app)
        assert "▐X▌ snap-suite" in text  # the plan's suite: ticked
        unticked = [s for s in ("categories", "smoke", "long-output") if f"▐ ▌ {s}" in text]
        assert unticked  # the other suites under suites/: a blank box, not an X in another colour
        keep = app.screen.query_one("#keep-servers")
        assert "▐ ▌ Keep servers" in text and not keep.value
        keep.value = True
        await settle(pilot)
        assert "▐X▌ Keep servers" in screen_text(app)
        picks.deselect("snap-suite")
        await settle(pilot)
        assert "▐ ▌ snap-suite" in screen_text(app)


async def test_a_stopped_row_drops_its_port_and_pgid(tmp_path, size):
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        row = lambda: next(ln for ln in lines(app) if ln.strip().startswith("baseline"))  # noqa: E731
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")
        await settle(pilot)
        assert "30001" in row() and "4242" in row()
        await pilot.press("x")  # the fake fleet's "stopped" event still names the port and the pgid
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "baseline stopped")
        await settle(pilot)
        assert "stopped" in row() and "30001" not in row() and "4242" not in row()
        assert (app.servers["baseline"].port, app.servers["baseline"].pgid) == (None, None)


async def test_every_tab_and_sub_tab_by_keyboard(tmp_path, results, size):
    app, _ = make_app(tmp_path, section="servers")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        for key, (name, title, _) in enumerate(SECTIONS, start=1):
            await pilot.press(str(key))
            await wait_for(pilot, lambda n=name: app.screen is app.get_screen(n), f"section {name}")
            await settle(pilot)
            assert f"{key} {title}" in lines(app)[0]
            tabs = app.screen.query(TabbedContent)
            if not tabs:
                continue
            sub = tabs.first()
            panes = [p.id for p in sub.query("TabPane") if sub.get_tab(p.id).display]
            visited = [sub.active]
            for _ in panes[1:]:
                await pilot.press("]")
                await settle(pilot)
                visited.append(sub.active)
                assert app.focused is not None and sub in app.focused.ancestors_with_self  # focus went along
            assert visited == panes, name
            await pilot.press("]")  # round to the first
            await settle(pilot)
            assert sub.active == panes[0]
            await pilot.press("[")
            await settle(pilot)
            assert sub.active == panes[-1]
        await pilot.press("3")
        await settle(pilot)
        assert isinstance(app.screen, ResultsScreen)


async def test_readme_help_and_hints_name_the_same_keys(tmp_path, size):
    readme = (ROOT / "README.md").read_text()
    assert readme_keys(key_sections()) in readme  # the README's table is the bindings' own
    assert "opens five sections" in readme
    assert [t for t, _ in key_sections()] == ["Everywhere"] + [title for _, title, _ in SECTIONS]
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        bound = {name: {b.key for b in cls.BINDINGS} | {b.key for b in app.BINDINGS} | {"ctrl+p", "ctrl+q"}
                 for name, _, cls in SECTIONS}
        for key, (name, _, _) in enumerate(SECTIONS, start=1):
            await pilot.press(str(key))
            await wait_for(pilot, lambda n=name: app.screen is app.get_screen(n), f"section {name}")
            await settle(pilot)
            text = screen_text(app)
            for ctrl in re.findall(r"ctrl\+[a-z]", text):  # a hint names a key that works here
                assert ctrl in bound[name], (name, ctrl)
        assert "ctrl+r" in app.tune_status and "ctrl+t" not in app.tune_status
        await pilot.press("?")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await settle(pilot)
        help_lines = str(app.screen.query_one("#help-text").render()).splitlines()
        for title, keys in key_sections():
            assert title in help_lines
            for k, d in keys:  # each key with its words on one line: nothing wrapped at 80 columns
                assert any(re.search(rf"(^|\s){re.escape(k)}\s+{re.escape(d)}(\s|$)", ln)
                           for ln in help_lines), \
                    (k, d)
        assert max(len(ln.rstrip())
                   for ln in help_lines) <= app.screen.query_one("#help-text").content_region.width
