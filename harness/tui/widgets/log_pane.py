"""One live log per server, bounded (the full log is on disk), with a `Decode batch`-only filter."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Log, Static

LOG_LINES = 2000  # per server, in the pane; the full log stays on disk
DECODE_MARK = "Decode batch"


def keep_line(line: str, decode_only: bool) -> bool:
    return not decode_only or DECODE_MARK in line


class LogPane(Vertical):
    """A title line and one `Log` per variant; only the selected variant's log is shown."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._buffers: dict[str, deque[str]] = {}
        self._ids: dict[str, str] = {}  # variant -> widget id (variant names may hold '.', not valid in ids)
        self.decode_only = False
        self.current: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="log-title", classes="pane-title", markup=False)
        yield ContentSwitcher(id="log-switcher")

    def _title(self) -> str:
        name = self.current or "(no server)"
        mode = "only Decode batch lines" if self.decode_only else "all lines"
        return f"log: {name}  ({mode}; f toggles)  full log on disk"

    def set_variants(self, variants: Iterable[str], lines: dict[str, Iterable[str]] | None = None) -> None:
        """Add a log for each variant not seen yet (the plan may arrive after the screen), with its lines."""
        switcher = self.query_one("#log-switcher", ContentSwitcher)
        for v in variants:
            if v in self._buffers:
                continue
            self._ids[v] = f"log-{len(self._ids)}"
            self._buffers[v] = deque(maxlen=LOG_LINES)
            log = Log(max_lines=LOG_LINES, id=self._ids[v], classes="server-log")
            switcher.mount(log)
            if lines and lines.get(v):
                self.append(v, lines[v])
        if self.current is None and self._ids:
            self.show(next(iter(self._ids)))

    def _log(self, variant: str) -> Log | None:
        wid = self._ids.get(variant)
        found = self.query(f"#{wid}") if wid else None
        return found.first(Log) if found else None

    def show(self, variant: str | None) -> None:
        if variant is None or variant == self.current or variant not in self._ids:
            return
        self.current = variant
        self.query_one("#log-switcher", ContentSwitcher).current = self._ids[variant]
        self.query_one("#log-title", Static).update(self._title())

    def append(self, variant: str, lines: Iterable[str]) -> None:
        buf = self._buffers.get(variant)
        if buf is None:
            return
        lines = list(lines)
        buf.extend(lines)
        log = self._log(variant)
        shown = [ln for ln in lines if keep_line(ln, self.decode_only)]
        if log is not None and shown:
            log.write_lines(shown)

    def set_decode_only(self, on: bool) -> None:
        """Re-render every log from its buffer with the filter applied."""
        self.decode_only = on
        for variant, buf in self._buffers.items():
            log = self._log(variant)
            if log is not None:
                log.clear()
                log.write_lines([ln for ln in buf if keep_line(ln, on)])
        self.query_one("#log-title", Static).update(self._title())

    def visible_lines(self, variant: str) -> list[str]:
        log = self._log(variant)
        return list(log.lines) if log is not None else []
