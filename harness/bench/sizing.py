"""Phase sizing: a closed-loop phase whose suite is too short to decide in one pass cycles it.

A phase decides only with a steady state (all slots busy) of at least run.min_steady_s and at least
4 x concurrency requests (harness.analysis.verdicts). A suite of 64 prompts at concurrency 8 on a fast
server gives seconds; repeats do not lengthen a phase. So the phase replays its suite again (the same
prompts in a new order, seeded by the phase and the pass, so every variant sees the same orders), each
replay tagged with its pass (records' `replay_pass`, request ids `suite/prompt#pK`), until it reaches both,
up to run.max_phase_s.

The rule, decided each time a pass has been sent in full (the queue runs dry; the slots are still busy):
  one pass      elapsed / passes sent so far (the closed loop refills at once, so the steady state runs
                from the first send to the moment the last pass has been sent);
  more passes   while requests sent < 4 x concurrency, or elapsed < min_steady_s x MARGIN, and another pass
                plus the tail (the requests still in flight) fits under max_phase_s.
The first repeat of a (variant, suite, concurrency) sizes itself; later repeats replay at least as many
passes, so repeats compare like with like (harness.bench.runner keeps the count). A later repeat that runs
faster than the first (a load burst slowed the first down) would fall under the floor with the first's count:
it goes on by the same rule, one pass at a time, instead of ending too short to decide. Pairing per prompt
takes the passes both arms ran (harness.analysis.verdicts), rates are per second, so the extra pass changes
no figure's definition.
"""

from __future__ import annotations

import contextlib
import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.inputs.suites import Prompt

MARGIN = 1.2  # the steady state ends a little before the last pass is sent: aim above the floor


@dataclass
class Sizer:
    prompts: int  # requests of one pass (turns of conversations count once: they share a slot)
    concurrency: int
    min_steady_s: float
    max_phase_s: float
    min_requests: int
    fixed_passes: int | None = None  # later repeats: at least this many (more only while still short)
    clock: Callable[[], float] = time.perf_counter
    # (prompts, one-pass s, passes, s, capped)
    on_plan: Callable[[int, float, int, float, bool], None] | None = None
    # (passes): a pass starts, planned or not (the progress total)
    on_pass: Callable[[int], None] | None = None
    passes: int = 1
    counted: int = 0  # requests of passes after the first already added to the run's progress total
    _t0: float | None = None
    _told: bool = False

    def start(self) -> None:
        self._t0 = self.clock()

    def another(self) -> bool:
        """Called when pass `self.passes` has been sent in full: start one more?"""
        if self.fixed_passes is not None and self.passes < self.fixed_passes:
            go = True
        else:
            elapsed = self.clock() - (self._t0 if self._t0 is not None else self.clock())
            one = elapsed / self.passes
            sent = self.passes * self.prompts
            # the requests in flight when the last pass has been sent finish in about one request's time
            tail = one * min(self.concurrency, self.prompts) / max(1, self.prompts)
            want = max(math.ceil(self.min_requests / max(1, self.prompts)),
                       math.ceil(self.min_steady_s * MARGIN / one) if one > 0 else 1)
            fits = max(1, math.floor((self.max_phase_s - tail) / one)) if one > 0 else want
            short = sent < self.min_requests or elapsed < self.min_steady_s * MARGIN
            go = short and elapsed + one + tail <= self.max_phase_s
            if (self.fixed_passes is None and not self._told and short and sent >= 2 * self.concurrency
                    and self.on_plan is not None):
                self._told = True
                planned = min(want, fits)
                self.on_plan(self.prompts, one, planned, one * planned, fits < want)
        if go:
            self.passes += 1
            if self.on_pass is not None:
                self.on_pass(self.passes)
        return go


def level_prompts(prompts: list[Prompt], per_slot: int | None, concurrency: int) -> list[Prompt]:
    """run.requests_per_slot: a closed-loop phase of exactly per_slot x concurrency requests, the suite's
    first ones, cycled where it holds fewer (a cycle's copies named as phase sizing names a pass, `id#pK`).
    Unset, or an open-loop phase (concurrency 0): the suite as it is."""
    if not per_slot or concurrency <= 0 or not prompts:
        return list(prompts)
    n, size = per_slot * concurrency, len(prompts)
    return [prompts[i % size] if i < size else
            prompts[i % size].model_copy(update={"id": f"{prompts[i % size].id}{pass_suffix(i // size + 1)}"})
            for i in range(n)]


def pass_suffix(pass_no: int) -> str:
    """Pass 1 keeps the plain request id, so a phase of one pass reads exactly as before."""
    return "" if pass_no <= 1 else f"#p{pass_no}"


def sized_passes(phases_csv: Path) -> dict[tuple[str, str, int], int]:
    """(variant, suite, concurrency) -> the passes its first sized phase ran (phases.csv), for a resumed run's
    later repeats."""
    out: dict[tuple[str, str, int], int] = {}
    if not phases_csv.exists():
        return out
    with open(phases_csv, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                key = (row["variant"], row["suite"], int(row["concurrency"]))
                if row.get("passes") and int(row["concurrency"]) > 0:
                    out.setdefault(key, int(row["passes"]))
    return out
