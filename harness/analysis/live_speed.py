"""slower-than-baseline while servers run outside a measured run (the TUI's Servers section, regen traffic):
from the servers' own decode windows, a speculative variant against the baseline at the same batch size."""

from __future__ import annotations

import statistics

from harness.common.events import Alarm
from harness.common.logwindow import LogWindow

MIN_WINDOWS = 5  # per variant and batch size before comparing
MARGIN = 0.95  # median gen throughput under 95% of the baseline's: slower beyond the windows' jitter


class LiveSpeed:
    def __init__(self, baseline: str | None, *, min_windows: int = MIN_WINDOWS, margin: float = MARGIN):
        self.baseline = baseline
        self.min_windows = min_windows
        self.margin = margin
        self.tok_s: dict[tuple[str, int], list[float]] = {}
        self.fired: set[tuple[str, int]] = set()

    def feed(self, variant: str, window: LogWindow) -> list[Alarm]:
        tok_s, batch = window.gen_throughput, window.running_req
        if window.kind != "decode" or not tok_s or not batch or self.baseline is None:
            return []
        self.tok_s.setdefault((variant, int(batch)), []).append(float(tok_s))
        pairs = [variant] if variant != self.baseline \
            else [v for v, b in self.tok_s if b == batch and v != variant]
        return [a for v in pairs for a in self._compare(v, int(batch))]

    def _compare(self, variant: str, batch: int) -> list[Alarm]:
        mine, base = self.tok_s.get((variant, batch), []), self.tok_s.get((self.baseline or "", batch), [])
        if (variant, batch) in self.fired or len(mine) < self.min_windows or len(base) < self.min_windows:
            return []
        m, b = statistics.median(mine), statistics.median(base)
        if m >= self.margin * b:
            return []
        self.fired.add((variant, batch))
        return [Alarm(variant, "warning", "slower-than-baseline",
                      f"{m:.0f} tok/s vs the baseline's {b:.0f} at batch {batch} ({m / b:.2f}x, median of "
                      "the servers' decode windows): the drafter costs more than it saves here")]
