"""DataTable with one fix: the header row is drawn again once new column widths are measured."""

from __future__ import annotations

from textual import events
from textual.widgets import DataTable


class Table(DataTable):
    # Textual 8.2.8 measures new rows' widths on idle without bumping its render-cache key, so a header
    # drawn between add_row and that idle keeps the old, narrower widths (seen in snapshots).
    async def _on_idle(self, event: events.Idle) -> None:
        remeasure = self._require_update_dimensions or bool(self._updated_cells)
        await super()._on_idle(event)
        if remeasure:
            self._update_count += 1
            self.refresh()
