"""The stopping rule of `run.stop: decided`: when to look at a row's interval again, at which confidence, and
how much more data would decide it. Pure: numbers in, numbers out (tests/test_sequential.py).

Stopping when a verdict is decided is optional stopping: a row looked at K times with a 95 % interval each
time would cover the truth less than 95 % of the time. The rule here is a group-sequential design with
Haybittle-Peto boundaries, spent by a Bonferroni (union) bound:
  * the looks are fixed before any data: after repeats r_1 < r_2 < ... < r_K (look_schedule: r_1 is the
    plan's run.repeats, then doubling, the last one run.max_repeats);
  * every look but the last is taken at alpha_interim = 0.005 (a 99.5 % interval), the last at
    alpha - (K - 1) * 0.005 (97 % when K = 3); the alphas add up to alpha = 0.04;
  * a row stops at the first look whose interval decides it (faster, slower or equivalent); the interval it
    reports is that look's.
P(some look's interval misses the truth) <= the sum of the looks' alphas = alpha, whatever rule picks the
stopping look, so the reported interval covers the truth with >= 96 % and a decided verdict is wrong (its
interval lies wholly on the wrong side) at most 4 % of the time. 4 %, not 5 %: for a true speedup of
exactly 1.00 every miss of the interval is a wrong faster/slower verdict, and the looks' union bound is
nearly tight (2,000 seeded rows: 5.0 % at alpha 0.05, tests/test_sequential.py), so 0.05 would sit on the
5 % bar rather than under it. The union bound ignores the correlation
between looks, so the true coverage is a little higher: conservative, never optimistic. Haybittle-Peto
keeps the last look's interval nearly as narrow as a fixed design's (97 % against 95 %) while still letting
a clear-cut row (a 2x drafter, a 0.5x one) stop at its first look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.04  # the rule's error spent over all its looks (docs/metrics.md: why 4 % and not 5 %)
INTERIM_ALPHA = 0.005  # Haybittle-Peto: every look before the last at 99.5 %


def look_schedule(first: int, cap: int) -> list[int]:
    """Repeats at each look: first, then doubling, the last one exactly `cap` (>= first)."""
    first, cap = max(1, int(first)), max(1, int(cap))
    if cap <= first:
        return [first]
    out = [first]
    while out[-1] * 2 < cap:
        out.append(out[-1] * 2)
    out.append(cap)
    return out


def look_alpha(look: int, looks: int, alpha: float = ALPHA, interim: float = INTERIM_ALPHA) -> float:
    """Two-sided alpha of look `look` (1-based) of `looks`; the looks' alphas add up to `alpha`."""
    if looks <= 1:
        return alpha
    interim = min(interim, alpha / (2 * (looks - 1)))  # many looks: never more than half of alpha on interims
    return interim if look < looks else alpha - (looks - 1) * interim


def look_level(look: int, looks: int, alpha: float = ALPHA) -> float:
    return 1.0 - look_alpha(look, looks, alpha)


def half_width_log(low: float, high: float) -> float:
    return (math.log(high) - math.log(low)) / 2.0


def needed_half_width(estimate: float, equivalence: float) -> float:
    """The interval half-width (in log) that would decide a row whose point estimate stays where it is: the
    nearer of excluding 1.00x (|log estimate|) and fitting the whole interval inside the equivalence band
    (log(1 + band) - |log estimate|)."""
    d = abs(math.log(estimate))
    return max(d, math.log1p(equivalence) - d)


@dataclass(frozen=True)
class Need:
    units: int  # repeats (or prompts x repeats at concurrency 1) that would decide it, in all
    more: int  # of which not yet measured


def units_needed(low: float, high: float, estimate: float, units: int, equivalence: float) -> Need | None:
    """How many units (the interval's own: repeats, or prompts at concurrency 1) would decide an undecided
    row: a half-width shrinks as 1/sqrt(units), so units x (half / needed)^2. None: no interval."""
    if not (low > 0 and high > 0 and estimate > 0 and units > 0):
        return None
    half, need = half_width_log(low, high), needed_half_width(estimate, equivalence)
    if need <= 0:
        return None
    total = max(units + 1, math.ceil(units * (half / need) ** 2))
    return Need(total, total - units)
