"""Phase sizing's rule (harness.bench.sizing) on a virtual clock: how many passes a phase replays."""

from __future__ import annotations

from harness.bench.sizing import Sizer


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _passes(sizer: Sizer, clock: Clock, pass_s: float, limit: int = 50) -> int:
    """Run the sizer over passes that each take pass_s seconds to send; the passes it ran."""
    sizer.start()
    for _ in range(limit):
        clock.t += pass_s
        if not sizer.another():
            break
    return sizer.passes


def test_the_first_repeat_replays_until_the_floor_and_says_so():
    clock, told = Clock(), []
    sizer = Sizer(prompts=8, concurrency=1, min_steady_s=1.0, max_phase_s=60, min_requests=4, clock=clock,
                  on_plan=lambda *a: told.append(a))
    assert _passes(sizer, clock, 0.3) == 4  # 1.2 s (the floor x 1.2) takes 4 passes of 0.3 s
    assert told and told[0][2] == 4 and not told[0][4]


def test_a_later_repeat_replays_the_first_count_when_that_reaches_the_floor():
    clock, told = Clock(), []
    sizer = Sizer(prompts=8, concurrency=1, min_steady_s=1.0, max_phase_s=60, min_requests=4, clock=clock,
                  fixed_passes=4, on_plan=lambda *a: told.append(a))
    assert _passes(sizer, clock, 0.3) == 4
    assert _passes(Sizer(prompts=8, concurrency=1, min_steady_s=1.0, max_phase_s=60, min_requests=4,
                         clock=clock, fixed_passes=4), clock, 0.5) == 4  # slower: still the same count
    assert told == []  # a later repeat plans nothing new to say


def test_a_later_repeat_that_runs_faster_goes_on_instead_of_ending_too_short():
    """The first repeat was slowed by a burst of load: 4 passes of 0.3 s. The later one runs at 0.1 s a pass;
    with 4 passes it would hold 0.4 s of steady state, under the 1 s floor: it goes on to 12 (1.2 s)."""
    clock, started = Clock(), []
    sizer = Sizer(prompts=8, concurrency=1, min_steady_s=1.0, max_phase_s=60, min_requests=4, clock=clock,
                  fixed_passes=4, on_pass=started.append)
    assert _passes(sizer, clock, 0.1) == 12
    assert started == list(range(2, 13))  # every pass it started counted for the progress total


def test_a_later_repeat_still_stops_at_max_phase_s():
    clock = Clock()
    sizer = Sizer(prompts=8, concurrency=1, min_steady_s=10.0, max_phase_s=1.0, min_requests=4, clock=clock,
                  fixed_passes=2)
    assert _passes(sizer, clock, 0.1) == 9  # a tenth pass plus its tail would end past 1 s
