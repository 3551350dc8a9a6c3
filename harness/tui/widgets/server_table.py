"""The Servers table: one row per variant, cells updated in place by stable row and column keys."""

from __future__ import annotations

from rich.text import Text

from harness.tui.state import ServerView
from harness.tui.widgets.table import Table, plain_cell

COLUMNS = [
    ("variant", "variant"),
    ("state", "state"),
    ("port", "port"),
    ("pid", "pgid"),
    ("uptime", "uptime"),
    ("gpu", "GPU MiB"),
    ("alarms", "alarms"),
]
STATE_STYLE = {
    "ready": "server-table--ready",
    "starting": "server-table--starting",
    "stopping": "server-table--starting",
    "failed": "server-table--failed",
}


def format_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def alarm_summary(view: ServerView) -> str:
    if not view.alarms:
        return ""
    worst = min(
        view.alarms,
        key=lambda a: (
            ("error", "warning", "info").index(a.severity)
            if a.severity in ("error", "warning", "info")
            else 3
        ),
    )
    more = f" +{len(view.alarms) - 1}" if len(view.alarms) > 1 else ""
    return f"{worst.severity}: {worst.code}{more}"


class ServerTable(Table):
    COMPONENT_CLASSES = {
        "server-table--ready",
        "server-table--starting",
        "server-table--failed",
        "server-table--alarm",
    }

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.fixed_columns = 1  # the variant stays put while left/right scroll to the alarms
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def _state_cell(self, view: ServerView) -> Text:
        cls = STATE_STYLE.get(view.state)
        label = view.state + (" (run)" if view.source == "run" and view.state != "stopped" else "")
        return Text(label, style=self.get_component_rich_style(cls)) if cls else Text(label)

    def _cells(self, view: ServerView, now: float) -> dict[str, object]:
        uptime = now - view.ready_since if view.state == "ready" and view.ready_since is not None else None
        alarm = alarm_summary(view)
        return {
            "variant": view.variant,
            "state": self._state_cell(view),
            "port": str(view.port) if view.port else "-",
            "pid": str(view.pgid) if view.pgid else "-",
            "uptime": format_uptime(uptime),
            "gpu": str(view.gpu_mib) if view.gpu_mib is not None else "-",
            "alarms": Text(alarm, style=self.get_component_rich_style("server-table--alarm"))
            if alarm
            else "",
        }

    def sync(self, views: dict[str, ServerView], now: float) -> None:
        """Add new rows, update changed cells; rows are never cleared and rebuilt."""
        with self.app.batch_update():
            for name, view in views.items():
                cells = self._cells(view, now)
                if name not in self.rows:
                    self.add_row(*(cells[k] for k, _ in COLUMNS), key=name)
                    continue
                for key, value in cells.items():
                    if self.get_cell(name, key) != plain_cell(value):
                        self.update_cell(name, key, value, update_width=True)
            for key in [k for k in self.rows if k.value not in views]:
                self.remove_row(key)

    @property
    def selected(self) -> str | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return key.value
