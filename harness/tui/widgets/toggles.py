"""Check boxes that read without colour: Textual draws a ticked and an unticked box with the same `X`, told
apart by colour alone (a monochrome terminal, NO_COLOR, a screen reader or a screenshot in print show none).
Here a ticked box holds `X` and an unticked one a blank."""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import Checkbox as _Checkbox
from textual.widgets import SelectionList as _SelectionList
from textual.widgets.selection_list import SelectionType

TICKED, UNTICKED = "X", " "


class Checkbox(_Checkbox):
    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 (Textual's name, read per render)
        return TICKED if self.value else UNTICKED


class SelectionList(_SelectionList[SelectionType]):
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            selection = self.get_option_at_index(round(self.scroll_offset.y) + y)
        except Exception:  # past the last option: a blank line
            return strip
        if selection.value in self._selected:
            return strip
        segments = list(strip)
        if len(segments) < 2 or segments[1].text != TICKED:
            return strip
        segments[1] = Segment(UNTICKED, segments[1].style)
        return Strip(segments, strip.cell_length)
