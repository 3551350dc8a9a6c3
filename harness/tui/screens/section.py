"""What every section screen shares: the section tabs, the plan line and the footer."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from harness.tui.widgets.nav import SectionTabs


class SectionScreen(Screen):
    SECTION = ""

    def compose_top(self) -> ComposeResult:
        yield SectionTabs(self.SECTION)
        yield Static("", id="plan-line")

    def compose_bottom(self) -> ComposeResult:
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "plan_line", self._show_plan_line)

    def _show_plan_line(self, text: str) -> None:
        self.query_one("#plan-line", Static).update(text)
