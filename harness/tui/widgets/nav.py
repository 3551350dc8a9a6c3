"""The section tabs at the top of every screen (clickable, a mirror of the 1-5 keys), and the footer."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer, Tab, Tabs

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


class SectionFooter(Footer):
    """Textual's Footer, rebuilt only when what it shows changed and its screen is on top
    (benchmarks/tui_responsiveness.py).

    Footer rebuilds all its keys whenever its screen's bindings may have changed, which includes every switch
    to and from the screen and every dialog over it: 10-50 ms each, and new widgets whose caches Textual keeps
    (an lru_cache keyed on each widget's StylesCache), so full GC pauses grew with every switch.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None  # what the keys on display were built from

    def _what_it_shows(self) -> tuple:
        palette = self.app.COMMAND_PALETTE_BINDING
        keys = tuple(
            (key, binding, enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
            if binding.show or key == palette
        )
        return keys, self.compact, self.show_command_palette

    def bindings_changed(self, screen: Screen) -> None:
        if self.app.screen is screen:  # a hidden screen gets its footer checked again when it resumes
            super().bindings_changed(screen)

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
