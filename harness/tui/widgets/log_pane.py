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
        # Lines reach a Log only while it is on display and wait in `_pending` meanwhile; a Log that missed
        # more than it holds, or whose filter changed, is rebuilt from its buffer (`_stale`). Feeding a hidden
        # Log costs as much as a shown one, and behind a dialog each write repaints the whole dimmed screen
        # (benchmarks/tui_responsiveness.py).
        self._pending: dict[str, list[str]] = {}
        self._stale: set[str] = set()
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
        self._catch_up(variant)
        self.query_one("#log-switcher", ContentSwitcher).current = self._ids[variant]
        self.query_one("#log-title", Static).update(self._title())

    def _on_display(self, variant: str) -> bool:
        try:
            return variant == self.current and self.screen is self.app.screen
        except Exception:  # no screen while the app starts or shuts down
            return False

    def append(self, variant: str, lines: Iterable[str]) -> None:
        buf = self._buffers.get(variant)
        if buf is None:
            return
        lines = list(lines)
        buf.extend(lines)
        if variant not in self._stale:
            pending = self._pending.setdefault(variant, [])
            pending.extend(lines)
            if len(pending) >= LOG_LINES:  # the whole Log will be new: take it from the buffer
                self._stale.add(variant)
                del self._pending[variant]
        if self._on_display(variant):
            self._catch_up(variant)

    def _catch_up(self, variant: str) -> None:
        """Bring the variant's Log up to its buffer."""
        log = self._log(variant)
        if log is None:  # not mounted yet
            self._stale.add(variant)
            self._pending.pop(variant, None)
        elif variant in self._stale:
            self._stale.discard(variant)
            self._pending.pop(variant, None)
            log.clear()
            log.write_lines([ln for ln in self._buffers[variant] if keep_line(ln, self.decode_only)])
        else:
            shown = [ln for ln in self._pending.pop(variant, ()) if keep_line(ln, self.decode_only)]
            if shown:
                log.write_lines(shown)

    def catch_up(self) -> None:
        """The screen is on display again: show what arrived meanwhile."""
        if self.current is not None:
            self._catch_up(self.current)

    def set_decode_only(self, on: bool) -> None:
        """Re-render the shown log from its buffer with the filter applied (the others when shown)."""
        self.decode_only = on
        self._stale.update(self._buffers)
        self._pending.clear()
        self.catch_up()
        self.query_one("#log-title", Static).update(self._title())

    def visible_lines(self, variant: str) -> list[str]:
        log = self._log(variant)
        return list(log.lines) if log is not None else []
