"""The section tabs at the top of every screen: clickable, and a mirror of the 1-4 keys."""

from __future__ import annotations

from textual.widgets import Tab, Tabs

SECTIONS = [("servers", "1 Servers"), ("run", "2 Run"), ("results", "3 Results"), ("retrain", "4 Retrain")]


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
