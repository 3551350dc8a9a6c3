"""Small charts: labelled sparklines per variant over time, and horizontal bars of tok/s per variant."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Label, Sparkline, Static

BAR = "█"
PARTIAL = " ▏▎▍▌▋▊▉"


def bar_text(value: float, top: float, width: int) -> str:
    """A bar of `width` cells for `top`, with eighth-cell resolution."""
    if top <= 0 or value <= 0 or width <= 0:
        return ""
    eighths = round(value / top * width * 8)
    full, rest = divmod(eighths, 8)
    return BAR * full + (PARTIAL[rest] if rest else "")


class SeriesPanel(Vertical):
    """One labelled sparkline per variant; rows appear as variants first report a value."""

    def __init__(self, title: str, fmt: Callable[[float], str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self._rows: dict[str, tuple[Label, Sparkline]] = {}

    def compose(self) -> ComposeResult:
        yield Static(self.title, classes="pane-title")
        yield Static("waiting for server log windows", classes="series-empty")

    def update_series(self, series: dict[str, Sequence[float]]) -> None:
        if series:
            for empty in self.query(".series-empty"):
                empty.remove()
        for variant, data in series.items():
            if not data:
                continue
            text = f"{variant[:18]:<18} {self.fmt(data[-1]):>8}"
            if variant not in self._rows:
                label, spark = (
                    Label(text, classes="series-label"),
                    Sparkline(list(data), classes="series-line"),
                )
                self._rows[variant] = (label, spark)
                self.mount(Horizontal(label, spark, classes="series-row"))
            else:
                label, spark = self._rows[variant]
                label.update(text)
                spark.data = list(data)


class BarChart(Widget):
    """tok/s per (variant, concurrency): the winner and the variants slower than the baseline styled apart.
    Drawn at render time, so the bars always fit the width the widget has then."""

    COMPONENT_CLASSES = {"bar-chart--bar", "bar-chart--winner", "bar-chart--slower"}
    DEFAULT_CSS = "BarChart { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._items: list[tuple[str, float | None, str]] = []

    def set_items(self, items: list[tuple[str, float | None, str]]) -> None:
        """(label, tok/s or None, kind) with kind one of "", "winner", "slower"."""
        self._items = items
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(len(self._items), 1)

    def render(self) -> Text:
        if not self._items:
            return Text("no results loaded")
        label_w = min(max(len(lbl) for lbl, _, _ in self._items), 28)
        top = max((v for _, v, _ in self._items if v is not None), default=0.0)
        width = max(self.size.width - label_w - 12, 10)
        out = Text()
        for i, (label, value, kind) in enumerate(self._items):
            style = self.get_component_rich_style(f"bar-chart--{kind or 'bar'}")
            out.append(f"{label[:label_w]:<{label_w}} ")
            out.append(bar_text(value or 0.0, top, width), style=style)
            out.append(f" {value:.1f}" if value is not None else " -")
            if i < len(self._items) - 1:
                out.append("\n")
        return out
