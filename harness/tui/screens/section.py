"""What every section screen shares: the section tabs, the plan line and the footer."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static, TabbedContent

from harness.tui.widgets.nav import SectionFooter, SectionTabs, cycle_tab

# the sub-tabs of a section with them (Results, Retrain): every tab reachable without the mouse
SUB_TAB_KEYS = [
    Binding("right_square_bracket", "sub_tab(1)", "Next tab", key_display="]"),
    Binding("left_square_bracket", "sub_tab(-1)", "Previous tab", key_display="[", show=False),
]


class SectionScreen(Screen):
    SECTION = ""
    # keys its widgets own (a table's enter), said in `?` help and README
    HELP_KEYS: list[tuple[str, str]] = []

    def __init__(self) -> None:
        super().__init__()
        self._styled_for: tuple | None = None  # what the app's styling was when this screen was hidden

    def compose_top(self) -> ComposeResult:
        yield SectionTabs(self.SECTION)
        yield Static("", id="plan-line")

    def compose_bottom(self) -> ComposeResult:
        yield SectionFooter()

    def on_mount(self) -> None:
        self.watch(self.app, "plan_line", self._show_plan_line)

    def _show_plan_line(self, text: str) -> None:
        self.query_one("#plan-line", Static).update(text)

    def action_sub_tab(self, step: int) -> None:
        tabs = self.query(TabbedContent)
        if tabs:
            cycle_tab(tabs.first(), step)

    # ---- switching sections ------------------------------------------------------------------------------
    def _styling(self) -> tuple:
        app = self.app
        return (app._css_update_count, app.theme, app.ansi_color, app.app_focus)

    def _on_screen_suspend(self) -> None:
        self._styled_for = self._styling()

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        # Runs before Screen's own handler, which re-applies the whole stylesheet to every widget of the
        # screen on each switch (20-40 ms of a 40-60 ms switch). Changes to a hidden screen's widgets are
        # styled as they happen; only a new theme, stylesheet or terminal focus since then needs that pass.
        if self._styled_for is not None and self._styled_for == self._styling():
            event.refresh_styles = False
