"""Servers: every variant with its state, port, process group, uptime and GPU memory; start, stop,
restart one or all; a live log per server with a `Decode batch` filter; alarms on the variant."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.markup import escape
from textual.widgets import DataTable, Static

from harness.common.terminal import clean
from harness.tui.messages import ServerActionRequested
from harness.tui.screens.section import SectionScreen
from harness.tui.state import ServerView
from harness.tui.widgets.log_pane import LogPane
from harness.tui.widgets.server_table import ServerTable


class ServersScreen(SectionScreen):
    SECTION = "servers"
    BINDINGS = [
        Binding("s", "server('start')", "Start"),
        Binding("x", "server('stop')", "Stop"),
        Binding("r", "server('restart')", "Restart"),
        Binding("S", "server_all('start')", "Start all"),
        Binding("X", "server_all('stop')", "Stop all"),
        Binding("f", "toggle_filter", "Decode filter"),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        yield ServerTable(id="server-table")
        yield Static("", id="server-detail")
        yield LogPane(id="log-pane")
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.watch(self.app, "servers", self._show_servers)
        self.query_one(ServerTable).focus()

    # ---- attributes down ----------------------------------------------------------------------------------
    def _show_servers(self, views: dict[str, ServerView]) -> None:
        table = self.query_one(ServerTable)
        table.sync(views, self.app.clock())
        self.query_one(LogPane).set_variants(views, self.app.log_buffers)
        self._show_detail()

    def tick(self, now: float) -> None:
        """Uptimes move every second; only that column changes."""
        self.query_one(ServerTable).sync(self.app.servers, now)

    def append_log(self, variant: str, lines: tuple[str, ...]) -> None:
        self.query_one(LogPane).append(variant, lines)

    def on_screen_resume(self) -> None:
        self.query_one(LogPane).catch_up()  # lines that came while another section or a dialog was on top

    def _show_detail(self) -> None:
        name = self.query_one(ServerTable).selected
        view = self.app.servers.get(name) if name else None
        if view is None:
            self.query_one("#server-detail", Static).update("")
            return
        parts = [f"[b]{a.severity}[/b] {escape(clean(a.code))}: {escape(clean(a.text))}" for a in view.alarms]
        if view.state == "failed" and view.detail:
            parts.append("[b]failed[/b]: " + escape(clean(view.detail.strip().splitlines()[0])))
        self.query_one("#server-detail", Static).update("\n".join(parts) or "no alarms")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value:
            self.query_one(LogPane).show(event.row_key.value)
        self._show_detail()

    # ---- messages up --------------------------------------------------------------------------------------
    def action_server(self, action: str) -> None:
        name = self.query_one(ServerTable).selected
        if name:
            self.post_message(ServerActionRequested(action, (name,)))

    def action_server_all(self, action: str) -> None:
        names = tuple(self.app.servers)
        up = [n for n, v in self.app.servers.items() if v.state in ("starting", "ready")]
        if action != "stop" or not up:
            self.post_message(ServerActionRequested(action, names))
            return
        self.app.session_control.confirm(
            f"Stop all {len(up)} server(s)? " + ", ".join(up),
            [("yes", "Stop all")],
            lambda _: self.post_message(ServerActionRequested(action, names)),
        )

    def action_toggle_filter(self) -> None:
        pane = self.query_one(LogPane)
        pane.set_decode_only(not pane.decode_only)
