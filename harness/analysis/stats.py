"""Pure statistics of a speedup: confidence intervals, the in-flight profile of a phase, steady-state windows.

No pandas here: numpy arrays in, floats out, so every formula can be checked by hand (tests/test_stats.py).

Intervals are relative: each method estimates the spread of the speedup as factors (low/estimate,
high/estimate) and the caller places them around its reported speedup, so the reported point is always
inside its own interval. The bootstrap draws from a fixed seed: the same records give the same summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SEED = 14  # fixed: summaries are reproducible byte for byte
BOOTSTRAP_SAMPLES = 2000
STEADY_WINDOWS = 10  # equal slices of a phase's steady state for the window bootstrap

# two-sided 95 % Student t quantiles (t_{0.975, df}); between listed df the next lower one (conservative)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("a t interval needs at least 2 observations")
    return _T975[max(k for k in _T975 if k <= df)] if df <= 120 else 1.960


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with df degrees of freedom (df >= 1), through the regularized incomplete
    beta function: P(|T| > |x|) = I_{df/(df+x^2)}(df/2, 1/2)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by its continued fraction (Lentz), accurate to ~1e-12."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0) / a


def t_quantile(level: float, df: int) -> float:
    """The two-sided `level` quantile t_{(1+level)/2, df}. At level 0.95 it is the table above (t975), so
    every fixed-design interval stays exactly what it was; other levels (the stopping rule's looks,
    harness.analysis.sequential) are computed by bisection on t_cdf."""
    if abs(level - 0.95) < 1e-12:
        return t975(df)
    if not 0.0 < level < 1.0:
        raise ValueError(f"a confidence level lies between 0 and 1, got {level}")
    target = (1.0 + level) / 2.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < target:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def t_interval_log(ratios: list[float] | np.ndarray,
                   level: float = 0.95) -> tuple[float, float, float] | None:
    """`level` (95 %) t interval of the geometric mean of paired ratios (one per repeat): (estimate, low,
    high).

    log ratios are near-normal for throughput ratios, and with 2-5 repeats a bootstrap would only ever
    redraw the same few values; the t quantile pays for the small n honestly (df = n - 1)."""
    d = np.log(np.asarray(ratios, dtype=float))
    if len(d) < 2 or not np.all(np.isfinite(d)):
        return None
    mean = float(d.mean())
    half = t_quantile(level, len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _bootstrap_t(est: float, ratios: np.ndarray, df: int,
                 level: float = 0.95) -> tuple[float, float, float] | None:
    """est x exp(± t_{0.975,df} x the bootstrap standard error of log ratio). Plain percentiles of a ratio
    over 10-20 prompts cover the truth only ~90 % of the time (tests/test_stats.py); the t quantile widens
    the small-sample interval where it is too narrow and is the plain normal interval for many prompts."""
    logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)])
    if est <= 0 or len(logs) < 2:
        return None
    half = t_quantile(level, df) * float(logs.std(ddof=1))
    return est, est * math.exp(-half), est * math.exp(half)


def paired_bootstrap_ratio(tok_v: np.ndarray, time_v: np.ndarray, tok_b: np.ndarray, time_b: np.ndarray, *,
                           samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
                           ) -> tuple[float, float, float] | None:
    """Bootstrap over prompts of (Σtok_v/Σtime_v) / (Σtok_b/Σtime_b): (estimate, low, high)
    (_bootstrap_t).

    Element i of all four arrays is the same prompt in both arms (paired): one resample draws prompts, and
    a drawn prompt brings both its measurements, so per-prompt difficulty cancels out of the ratio."""
    got = _paired_resamples(tok_v, time_v, tok_b, time_b, samples, seed)
    if got is None:
        return None
    est, ratio, n = got
    return _bootstrap_t(est, ratio, n - 1, level)


def _paired_resamples(tok_v: np.ndarray, time_v: np.ndarray, tok_b: np.ndarray, time_b: np.ndarray,
                      samples: int, seed: int) -> tuple[float, np.ndarray, int] | None:
    """(the paired ratio, its bootstrap resamples over prompts, the number of prompts), or None when the
    four arrays are not one pair per prompt of at least two prompts."""
    arrays = [np.asarray(a, dtype=float) for a in (tok_v, time_v, tok_b, time_b)]
    n = len(arrays[0])
    if n < 2 or any(len(a) != n for a in arrays):
        return None
    tv, sv, tb, sb = arrays
    idx = np.random.default_rng(seed).integers(0, n, size=(samples, n))
    ratio = (tv[idx].sum(1) / sv[idx].sum(1)) / (tb[idx].sum(1) / sb[idx].sum(1))
    return float((tv.sum() / sv.sum()) / (tb.sum() / sb.sum())), ratio, n


def between_repeat_variance(log_ratios: list[float] | np.ndarray,
                            within_vars: list[float] | np.ndarray) -> float:
    """DerSimonian-Laird estimate of tau^2, the variance of the true log ratio from one repeat to the next
    (each repeat's log ratio `log_ratios[i]` measured with its own within-repeat variance `within_vars[i]`).

    A prompt bootstrap sees only the noise between prompts; a load change on the machine, a warmer GPU or a
    different server start shifts every prompt of a phase together, which resampling prompts cannot see. When
    the repeats disagree by more than their own noise allows (Cochran's Q above k - 1), the excess is tau^2;
    0 when they agree. Meta-analysis's standard moment estimator (DerSimonian & Laird 1986)."""
    y = np.asarray(log_ratios, dtype=float)
    v = np.asarray(within_vars, dtype=float)
    ok = np.isfinite(y) & np.isfinite(v) & (v > 0)
    y, v = y[ok], v[ok]
    if len(y) < 2:
        return 0.0
    w = 1.0 / v
    mean = float((w * y).sum() / w.sum())
    q = float((w * (y - mean) ** 2).sum())
    c = float(w.sum() - (w**2).sum() / w.sum())
    return max(0.0, (q - (len(y) - 1)) / c) if c > 0 else 0.0


def paired_bootstrap_log_sd(tok_v: np.ndarray, time_v: np.ndarray, tok_b: np.ndarray, time_b: np.ndarray, *,
                            samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
                            ) -> tuple[float, float] | None:
    """(log of the paired ratio, bootstrap sd of its log) over prompts, resampled as paired_bootstrap_ratio
    does."""
    got = _paired_resamples(tok_v, time_v, tok_b, time_b, samples, seed)
    if got is None:
        return None
    est, ratio, _ = got
    logs = np.log(ratio[np.isfinite(ratio) & (ratio > 0)])
    if est <= 0 or len(logs) < 2:
        return None
    return math.log(est), float(logs.std(ddof=1))


def two_sample_bootstrap_ratio(a: np.ndarray, b: np.ndarray, *, samples: int = BOOTSTRAP_SAMPLES,
                               seed: int = BOOTSTRAP_SEED,
                               level: float = 0.95) -> tuple[float, float, float] | None:
    """Bootstrap of mean(a) / mean(b), a and b resampled independently (steady-state windows of two runs do
    not pair): (estimate, low, high) (_bootstrap_t, df from the smaller sample)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2 or b.mean() <= 0:
        return None
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, len(a), size=(samples, len(a)))].mean(1)
    rb = b[rng.integers(0, len(b), size=(samples, len(b)))].mean(1)
    ratio = ra / np.where(rb > 0, rb, np.nan)
    return _bootstrap_t(float(a.mean() / b.mean()), ratio, min(len(a), len(b)) - 1, level)


@dataclass(frozen=True)
class InFlight:
    """How much concurrency a phase really offered, from its requests' [t_send, t_end] intervals."""

    span_s: float  # first send to last end
    mean_in_flight: float  # time-averaged requests in flight over the span: Σ(t_end - t_send) / span
    max_in_flight: int
    steady_start: float | None  # first instant with `concurrency` requests in flight (all slots busy)
    steady_end: float | None  # last instant the count drops from `concurrency` (the tail starts)

    @property
    def steady_s(self) -> float:
        if self.steady_start is None or self.steady_end is None:
            return 0.0
        return max(0.0, self.steady_end - self.steady_start)


def in_flight(t_send: np.ndarray, t_end: np.ndarray, concurrency: int) -> InFlight:
    """Sweep the send/end events in time order (an end before a send at the same instant: a slot is free
    before it is reused). The steady state runs from the first instant all slots are busy to the last
    instant they stop being so; the closed loop's refill gaps inside it (microseconds) stay in."""
    s, e = np.asarray(t_send, dtype=float), np.asarray(t_end, dtype=float)
    if len(s) == 0:
        return InFlight(0.0, 0.0, 0, None, None)
    span = float(e.max() - s.min())
    times = np.concatenate([e, s])
    steps = np.concatenate([-np.ones(len(e), dtype=int), np.ones(len(s), dtype=int)])
    order = np.lexsort((steps, times))  # by time, ends (-1) first
    count = np.cumsum(steps[order])
    t = times[order]
    full = count >= concurrency
    start = end = None
    if full.any():
        start = float(t[np.argmax(full)])
        drops = np.nonzero(full[:-1] & ~full[1:])[0]
        end = float(t[drops[-1] + 1]) if len(drops) else float(t[-1])
    mean = float((e - s).sum() / span) if span > 0 else float(len(s))
    return InFlight(span, mean, int(count.max()), start, end)


def tokens_in(arrival_t: np.ndarray, arrival_tokens: np.ndarray, start: float, end: float) -> float:
    t = np.asarray(arrival_t, dtype=float)
    m = (t >= start) & (t <= end)
    return float(np.asarray(arrival_tokens, dtype=float)[m].sum())


def window_rates(arrival_t: np.ndarray, arrival_tokens: np.ndarray, start: float, end: float,
                 windows: int = STEADY_WINDOWS) -> np.ndarray:
    """tok/s in `windows` equal slices of [start, end] (token arrivals binned by time)."""
    if end <= start or windows < 1:
        return np.array([])
    edges = np.linspace(start, end, windows + 1)
    counts, _ = np.histogram(np.asarray(arrival_t, dtype=float), bins=edges,
                             weights=np.asarray(arrival_tokens, dtype=float))
    return counts / ((end - start) / windows)
