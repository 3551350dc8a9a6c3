"""DataTable with three fixes: the header row is drawn again once new column widths are measured; a text
cell is shown as written (DataTable reads a str cell as Rich markup; a suite's category or a server's error
like `[/models/x]` raised MarkupError), its control characters made visible; and with a row cursor, left and
right scroll a whole column (DataTable's own scroll one cell, so the columns past a narrow terminal's edge
took dozens of presses to reach)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from textual import events
from textual.widgets import DataTable

if TYPE_CHECKING:
    from rich.text import TextType
    from textual.widgets.data_table import ColumnKey, RowKey

from harness.common.terminal import clean


def plain_cell(value: object) -> object:
    return escape(clean(value, one_line=True)) if isinstance(value, str) else value


class Table(DataTable):
    def add_row(self, *cells: object, height: int | None = 1, key: str | None = None,
                label: TextType | None = None) -> RowKey:
        return super().add_row(*(plain_cell(c) for c in cells), height=height, key=key, label=label)

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: object, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, plain_cell(value), update_width=update_width)

    # Textual 8.2.8 measures new rows' widths on idle without bumping its render-cache key, so a header
    # drawn between add_row and that idle keeps the old, narrower widths (seen in snapshots).
    async def _on_idle(self, event: events.Idle) -> None:
        remeasure = self._require_update_dimensions or bool(self._updated_cells)
        await super()._on_idle(event)
        if remeasure:
            self._update_count += 1
            self.refresh()

    # ---- sideways by whole columns -----------------------------------------------------------------------
    def _column_starts(self) -> list[int]:
        """Scroll offsets that put each scrolling column (after the fixed ones) at the left edge."""
        widths = [c.get_render_width(self) for c in self.ordered_columns]
        fixed = sum(widths[: self.fixed_columns])
        starts, x = [], fixed
        for w in widths[self.fixed_columns:]:
            starts.append(x - fixed)
            x += w
        return starts

    def scroll_columns(self, step: int) -> None:
        """One whole column right (step 1) or left (-1); the last columns come fully into view."""
        here = round(self.scroll_x)
        starts = self._column_starts()
        if step > 0:
            later = [s for s in starts if s > here]
            target = min(later[0], self.max_scroll_x) if later else self.max_scroll_x
        else:
            earlier = [s for s in starts if s < here]
            target = earlier[-1] if earlier else 0
        self.scroll_to(x=target, animate=False, immediate=True)

    def action_cursor_right(self) -> None:
        if self.cursor_type == "row" or not self.show_cursor:
            self._set_hover_cursor(False)
            self.scroll_columns(1)
        else:
            super().action_cursor_right()

    def action_cursor_left(self) -> None:
        if self.cursor_type == "row" or not self.show_cursor:
            self._set_hover_cursor(False)
            self.scroll_columns(-1)
        else:
            super().action_cursor_left()
