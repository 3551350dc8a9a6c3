"""The section tabs at the top of every screen (clickable, a mirror of the 1-5 keys), and the footer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Tab, TabbedContent, TabPane, Tabs
from textual.widgets._footer import FooterKey

if TYPE_CHECKING:
    from textual.app import App

SECTIONS = [("servers", "1 Servers"), ("run", "2 Run"), ("results", "3 Results"), ("retrain", "4 Retrain"),
            ("tune", "5 Tune")]


class SectionTabs(Tabs, can_focus=False):
    def __init__(self, active: str) -> None:
        super().__init__(
            *(Tab(label, id=f"tab-{key}") for key, label in SECTIONS),
            active=f"tab-{active}",
            id="section-tabs",
        )
        self._section = active

    async def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        event.stop()
        target = (event.tab.id or "").removeprefix("tab-") if event.tab else ""
        if target and target != self._section:
            await self.run_action(f"app.section('{target}')")


def cycle_tab(tabs: TabbedContent, step: int) -> str:
    """The next (step 1) or previous (-1) shown sub-tab of `tabs`, made active, the focus moved into it (a
    focused widget left in the hidden pane would switch it back); its id."""
    ids = [p.id for p in tabs.query(TabPane) if p.id and tabs.get_tab(p.id).display]
    if not ids:
        return tabs.active
    i = ids.index(tabs.active) if tabs.active in ids else 0
    tabs.active = ids[(i + step) % len(ids)]
    pane = tabs.get_pane(tabs.active)
    inside = next((w for w in pane.query("*") if w.focusable), None)
    (inside or tabs.query_one(Tabs)).focus()
    return tabs.active


Shown = tuple[Binding, bool, str]  # a key the footer shows: binding, enabled, tooltip


def key_width(app: App, binding: Binding, compact: bool) -> int:
    """Cells one FooterKey takes: ` k desc ` in the regular style, `k desc` and a 1-cell margin compact."""
    return cell_len(app.get_key_display(binding)) + cell_len(binding.description) + (2 if compact else 3)


def fit_keys(app: App, screen_keys: list[Shown], app_keys: list[Shown], palette: Binding | None,
             width: int) -> tuple[list[Shown], bool]:
    """What fits in `width` cells: every key in the regular style, else compact, else compact without the
    section's last keys (its BINDINGS are in order of importance; the app's `?` and `q` always stay; every
    key stays in `?` help and the command palette)."""
    def need(keys: list[Shown], compact: bool) -> int:
        extra = (key_width(app, palette, compact) + (1 if compact else 2)) if palette is not None else 0
        return sum(key_width(app, b, compact) for b, _, _ in keys) + extra

    if need(screen_keys + app_keys, False) <= width:
        return screen_keys + app_keys, False
    keep = list(screen_keys)
    while keep and need(keep + app_keys, True) > width:
        keep.pop()
    return keep + app_keys, True


class SectionFooter(Footer):
    """Textual's Footer with every key it shows in full: at a narrow width compact, then without the section's
    least important keys (fit_keys); rebuilt only when what it shows changed and its screen is on top
    (benchmarks/tui_responsiveness.py).

    Footer rebuilds all its keys whenever its screen's bindings may have changed, which includes every switch
    to and from the screen and every dialog over it: 10-50 ms each, and new widgets whose caches Textual keeps
    (an lru_cache keyed on each widget's StylesCache), so full GC pauses grew with every switch.
    """

    def __init__(self) -> None:
        super().__init__()
        self._shown: tuple | None = None  # what the keys on display were built from

    def _keys(self) -> tuple[list[Shown], bool, Any]:
        active = self.screen.active_bindings
        screen_keys: list[Shown] = []
        app_keys: list[Shown] = []
        seen: set[str] = set()
        for _node, binding, enabled, tooltip in active.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            (app_keys if _node is self.app else screen_keys).append((binding, enabled, tooltip))
        palette = active.get(self.app.COMMAND_PALETTE_BINDING) \
            if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE else None
        keys, compact = fit_keys(self.app, screen_keys, app_keys, palette[1] if palette else None,
                                 self.app.size.width)
        return keys, compact, palette

    def _what_it_shows(self) -> tuple:
        keys, compact, palette = self._keys()
        return tuple((b.key, b.description, enabled) for b, enabled, _ in keys), compact, palette is not None

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        keys, compact, palette = self._keys()
        self.compact = compact
        for binding, enabled, tooltip in keys:
            yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description,
                            binding.action, disabled=not enabled,
                            tooltip=tooltip).data_bind(compact=Footer.compact)
        if palette is not None:
            _node, binding, enabled, tooltip = palette
            yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description,
                            binding.action, classes="-command-palette", disabled=not enabled,
                            tooltip=binding.tooltip or binding.description)

    def bindings_changed(self, screen: Screen) -> None:
        if self.app.screen is screen:  # a hidden screen gets its footer checked again when it resumes
            super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and self.app.screen is self.screen:
            self.call_after_refresh(self.recompose)

    async def recompose(self) -> None:
        if not self.is_attached:
            return
        shown = self._what_it_shows() if self._bindings_ready else None
        if shown is not None and shown == self._shown:
            return
        await super().recompose()
        self._shown = shown
        # Textual 8.2.8 keeps a `compact` watcher for every FooterKey ever composed: drop the removed ones
        watchers = getattr(self, "__watchers", {}).get("compact")
        if watchers:
            watchers[:] = [(node, callback) for node, callback in watchers if not node._closing]
