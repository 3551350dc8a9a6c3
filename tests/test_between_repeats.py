"""Repeats that disagree beyond their prompts' noise widen the concurrency-1 interval (stats.between_repeat_
variance): a load change on the machine shifts every prompt of one phase together, which a bootstrap over
prompts cannot see. CI once promoted a retrained drafter identical to the current one (accept length 1.30
against 1.30) because its second repeat ran while the machine was less loaded: 0.91x in repeat 1, 1.30x in
repeat 2, "faster" at 99.5 % from the prompts alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.analysis.verdicts import _interval

PROMPTS = 16


def _requests(shift: dict[tuple[str, int], float], seed: int = 0) -> pd.DataFrame:
    """Two arms, two repeats, 16 prompts at concurrency 1: each prompt's seconds are its own difficulty times
    a per-(arm, repeat) factor (the phase's load) times a little per-request noise."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0.5, 1.5, PROMPTS)
    rows, t = [], 0.0
    for (arm, rep), factor in shift.items():
        for i in range(PROMPTS):
            secs = difficulty[i] * factor * rng.normal(1.0, 0.01)
            rows.append({"variant": arm, "concurrency": 1, "ok": True, "suite": "s", "prompt_id": f"p{i}",
                         "repeat": rep, "t_send": t, "t_end": t + secs, "output_tokens": 64})
            t += secs
    return pd.DataFrame(rows)


def _ci(rq: pd.DataFrame, level: float = 0.995):
    est, method, basis, units = _interval(rq, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), "new", "old", 1,
                                          level)
    return est, method, basis, units


def test_repeats_that_disagree_in_direction_do_not_decide():
    # the CI case: new 0.91x of old in repeat 1, 1.30x in repeat 2 (the load moved between the phases)
    rq = _requests({("old", 1): 1.0, ("new", 1): 1.1, ("old", 2): 1.3, ("new", 2): 1.0})
    v = rq[rq["variant"] == "new"]
    b = rq[rq["variant"] == "old"]
    pooled = stats.paired_bootstrap_ratio(np.full(PROMPTS, 128.0),
                                          v.groupby("prompt_id")["t_end"].sum().to_numpy()
                                          - v.groupby("prompt_id")["t_send"].sum().to_numpy(),
                                          np.full(PROMPTS, 128.0),
                                          b.groupby("prompt_id")["t_end"].sum().to_numpy()
                                          - b.groupby("prompt_id")["t_send"].sum().to_numpy(), level=0.995)
    assert pooled is not None and pooled[1] > 1.0  # the prompts alone called it faster
    est, method, basis, units = _ci(rq)
    assert method == "bootstrap-prompts+repeats" and units == 2 and "2 repeats" in basis
    assert est is not None and est[1] < 1.0 < est[2]  # now undecided


def test_repeats_that_agree_keep_the_prompt_interval():
    # a real difference, the same in both repeats: the prompt bootstrap's interval, unchanged, decides
    rq = _requests({("old", 1): 1.0, ("new", 1): 0.8, ("old", 2): 1.0, ("new", 2): 0.8})
    est, method, basis, units = _ci(rq)
    assert method == "bootstrap-prompts" and units == PROMPTS and basis == f"{PROMPTS} paired prompts"
    assert est is not None and est[1] > 1.2


def test_a_real_difference_with_some_load_change_still_decides():
    # 1.25x and 1.18x: the repeats differ beyond their prompts' noise, so the interval widens, but both are
    # far from 1.00x and it stays decided
    rq = _requests({("old", 1): 1.0, ("new", 1): 0.8, ("old", 2): 1.0, ("new", 2): 0.85})
    est, method, _, _ = _ci(rq, level=0.95)
    assert method == "bootstrap-prompts+repeats"
    assert est is not None and est[1] > 1.0


def test_between_repeat_variance_is_zero_when_repeats_agree_and_grows_with_their_spread():
    assert stats.between_repeat_variance([0.10, 0.11], [0.01**2, 0.01**2]) == 0.0
    small = stats.between_repeat_variance([0.10, 0.20], [0.01**2, 0.01**2])
    large = stats.between_repeat_variance([0.10, 0.40], [0.01**2, 0.01**2])
    assert 0.0 < small < large
    # two equal-variance repeats: tau^2 = (d^2 / 2) - v (the moment estimator), d the difference
    assert abs(large - (0.30**2 / 2 - 0.01**2)) < 1e-12
    assert stats.between_repeat_variance([0.1], [0.01]) == 0.0
