"""DataTable with two fixes: the header row is drawn again once new column widths are measured, and a
text cell is shown as written (DataTable reads a str cell as Rich markup; a suite's category or a
server's error like `[/models/x]` raised MarkupError), its control characters made visible."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual import events
from textual.widgets import DataTable

from harness.common.terminal import clean


def plain_cell(value: Any) -> Any:
    return escape(clean(value, one_line=True)) if isinstance(value, str) else value


class Table(DataTable):
    def add_row(self, *cells: Any, **kwargs: Any) -> Any:
        return super().add_row(*(plain_cell(c) for c in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell(row_key, column_key, plain_cell(value), **kwargs)

    # Textual 8.2.8 measures new rows' widths on idle without bumping its render-cache key, so a header
    # drawn between add_row and that idle keeps the old, narrower widths (seen in snapshots).
    async def _on_idle(self, event: events.Idle) -> None:
        remeasure = self._require_update_dimensions or bool(self._updated_cells)
        await super()._on_idle(event)
        if remeasure:
            self._update_count += 1
            self.refresh()
