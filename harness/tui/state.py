"""The TUI's state as plain immutable values, and the accumulator that folds run events into them.

No textual here: the App holds these, screens render them, tests build them directly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from harness.common import events as ev

if TYPE_CHECKING:
    from harness.common import logwindow

SERIES_POINTS = 120  # points kept per plot series (the newest)
GONE = ("stopped", "failed")  # server states without a process (a failed row keeps its port: "port N in use")


@dataclass(frozen=True)
class RunChoice:
    """What the Run section's form asks for; applied to the plan with `data.narrow_plan`."""

    suites: tuple[str, ...]
    variants: tuple[str, ...]
    concurrency: tuple[int, ...]
    max_tokens: int
    keep_servers: bool = False
    repeats: int | None = None  # None: the plan's run.repeats


@dataclass(frozen=True)
class TuneChoice:
    """What the Tune form asks for; the rest of TuneOptions keeps the CLI's defaults."""

    variant: str | None
    budget_s: float
    concurrency: list[int] | None  # None: the plan's
    steps: list[int]
    graphs: list[bool]  # CUDA graphs: [True, False] tries both
    cost_tokens: int = 96
    auto: bool = False  # "auto" in the Concurrency field: where speculation stops paying (tune_crossover)


@dataclass(frozen=True)
class Alarm:
    severity: str
    code: str
    text: str


@dataclass(frozen=True)
class ServerView:
    """One row of the Servers table."""

    variant: str
    state: str = "stopped"
    port: int | None = None
    pgid: int | None = None
    ready_since: float | None = None  # time.monotonic() when it became ready (uptime counts from here)
    detail: str = ""
    gpu_mib: int | None = None
    alarms: tuple[Alarm, ...] = ()
    source: str = ""  # "fleet" | "run": who owns the process

    def with_state(
        self, state: str, port: int | None, pgid: int | None, detail: str, source: str, now: float
    ) -> ServerView:
        since = self.ready_since if self.state == "ready" and state == "ready" else None
        if state == "ready" and since is None:
            since = now
        gone = state in GONE  # no process: its port and process group are history, not something to reach
        return replace(
            self,
            state=state,
            port=None if state == "stopped" else port if port is not None else self.port,
            pgid=None if gone else pgid if pgid is not None else self.pgid,
            detail=detail,
            ready_since=since,
            source=source,
            gpu_mib=self.gpu_mib if state == "ready" else None,
        )

    def with_alarm(self, alarm: Alarm) -> ServerView:
        if alarm in self.alarms:
            return self
        return replace(self, alarms=(*self.alarms, alarm))


@dataclass(frozen=True)
class ProgressSnapshot:
    """Live numbers of a run: what the progress panel and the plots show."""

    done: int = 0
    total: int = 0
    errors: int = 0
    variant: str | None = None
    phase: str | None = None
    concurrency: int | None = None
    phase_done: int = 0
    phase_total: int = 0
    live_tok_s: float | None = None  # this phase: Σ output tokens / (last end - first send)
    accept_len: dict[str, float] = field(default_factory=dict)  # newest decode window per variant
    gen_tok_s: dict[str, float] = field(default_factory=dict)  # newest window's gen throughput
    accept_series: dict[str, tuple[float, ...]] = field(default_factory=dict)
    tok_s_series: dict[str, tuple[float, ...]] = field(default_factory=dict)
    started_at: float | None = None  # the clock's time at RunStarted (time.monotonic by default)
    at: float | None = None  # the clock's time of this snapshot
    eta_s: float | None = None  # from the measured phases' seconds per request and the server start-ups

    def elapsed_s(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def eta_at(self, now: float) -> float | None:
        """The ETA counted down since the snapshot was taken (the panel redraws it every second)."""
        if self.eta_s is None or self.at is None:
            return None
        return max(0.0, self.eta_s - (now - self.at))


def verdict_lines(rows: Iterable[dict[str, Any]], variants: Iterable[str] | None = None) -> dict[str, str]:
    """Each speculative variant's verdict per concurrency from summary rows (harness.analysis.summary, whose
    verdicts are harness.analysis.verdicts' rule: the interval at the stopping rule's look level), in one
    line: `c1 faster 1.72x (99.5% CI 1.53-1.94, look 1/3); c4 undecided 1.60x (...)`. The live line and
    the final table are then the same rule on the same records. `variants`: only these (the finished)."""
    from harness.analysis.columns import is_true
    from harness.analysis.verdicts import level_label

    wanted = set(variants) if variants is not None else None
    out: dict[str, list[str]] = {}
    for r in rows:
        name, verdict = str(r.get("variant")), r.get("verdict")
        if is_true(r.get("baseline")) or not isinstance(verdict, str) or verdict in ("", "baseline"):
            continue
        if wanted is not None and name not in wanted:
            continue
        text = f"c{_num(r.get('concurrency'), '{:.0f}')} {verdict} {_num(r.get('speedup'), '{:.2f}x')}"
        low, high = _num(r.get("speedup_ci_low"), "{:.2f}"), _num(r.get("speedup_ci_high"), "{:.2f}")
        look = r.get("decide_look")
        inside = [f"{level_label(r.get('ci_level'))} CI {low}-{high}"] if low != "-" and high != "-" else []
        inside += [f"look {look}"] if isinstance(look, str) and look else []
        out.setdefault(name, []).append(text + (f" ({', '.join(inside)})" if inside else ""))
    return {name: "; ".join(parts) for name, parts in out.items()}


def _num(value: object, spec: str) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if v != v else spec.format(v)


class ProgressModel:
    """Folds RequestDone / PhaseStarted / LogWindow events into snapshots; numbers come from the events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started_at: float | None = None
        self.variants: tuple[str, ...] = ()
        self.seen: list[str] = []  # variants in the order their first phase began (the baseline runs first)
        self.phase_wall = 0.0  # Σ measured phase durations
        self.phase_requests = 0  # requests of those phases
        self.passes: dict[tuple[str, str, int], int] = {}  # (variant, suite, concurrency) -> passes sized
        self.done = self.total = self.errors = 0
        self.variant: str | None = None
        self.phase: str | None = None
        self.concurrency: int | None = None
        self.phase_done = self.phase_total = 0
        self._pass_size = 0  # requests of one pass of the current phase
        self._tokens = 0
        self._first_send: float | None = None
        self._last_end: float | None = None
        self.accept_len: dict[str, float] = {}
        self.gen_tok_s: dict[str, float] = {}
        self._accept: dict[str, deque[float]] = {}
        self._tok_s: dict[str, deque[float]] = {}

    def observe(self, event: object) -> bool:
        """Take one event; True when the snapshot changed."""
        if isinstance(event, ev.RunStarted):  # a run, or the next of a tune's runs: counts start again
            self.done, self.errors, self.variant, self.phase = 0, 0, None, None
            self.phase_done = self.phase_total = 0
            self.total = event.total_requests
            self.started_at, self.variants = self.clock(), tuple(event.variants)
        elif isinstance(event, ev.PhaseDone):
            self._phase_done(event)
        elif isinstance(event, ev.PhaseSized):  # the phase replays its suite: its total is every pass
            suite = event.phase.rpartition("@")[0]  # a suite name may hold an @ itself
            self.passes[(event.variant, suite, int(event.concurrency))] = int(event.passes)
            if event.variant == self.variant and event.phase == self.phase:
                self.phase_total = int(event.prompts) * int(event.passes)
        elif isinstance(event, ev.PhaseStarted):
            if event.variant not in self.seen:
                self.seen.append(event.variant)
            self.variant, self.phase, self.concurrency = event.variant, event.phase, event.concurrency
            # a later repeat replays at least as many passes as the first (harness.bench.sizing)
            passes = self.passes.get((event.variant, event.suite, int(event.concurrency)), 1)
            self.phase_done, self.phase_total = 0, event.requests * passes
            self._pass_size = event.requests
            self._tokens, self._first_send, self._last_end = 0, None, None
        elif isinstance(event, ev.RequestDone):
            self._request(event)
        elif isinstance(event, ev.LogWindow):
            return self._window(event.variant, event.window)
        else:
            return False
        return True

    def _request(self, e: ev.RequestDone) -> None:
        r = e.record
        self.done, self.total = e.done, e.total
        self.errors += 0 if r.ok else 1
        # a several-node run names its phases' variants variant@node, and its records by the variant alone
        if r.phase != self.phase or r.variant not in (self.variant, (self.variant or "").rpartition("@")[0]):
            return
        self.phase_done += 1
        if self.phase_done > self.phase_total:  # a later repeat ran faster and added a pass
            self.phase_total += max(1, self._pass_size)
        if r.ok:
            self._tokens += r.output_tokens or 0
            self._first_send = r.t_send if self._first_send is None else min(self._first_send, r.t_send)
            self._last_end = r.t_end if self._last_end is None else max(self._last_end, r.t_end)

    def _phase_done(self, e: ev.PhaseDone) -> None:
        if e.phase == self.phase and e.variant == self.variant:
            self.phase_wall += float(e.wall_s)
            self.phase_requests += self.phase_done
            # the passes the first repeat ran: its later repeats run at least as many
            if e.passes > 1 and self.concurrency is not None and e.phase.rpartition("#r")[2] in ("1", ""):
                self.passes[(e.variant, e.phase.rpartition("@")[0], int(self.concurrency))] = int(e.passes)

    def _eta(self, now: float) -> float | None:
        """Requests left x measured seconds per request, plus what each variant still to start cost so far
        beyond its phases (server start-up, warm-up, probes)."""
        if self.started_at is None or not self.phase_requests or not self.total:
            return None
        per_request = self.phase_wall / self.phase_requests
        overhead = max(0.0, (now - self.started_at) - self.phase_wall) / max(len(self.seen), 1)
        left_variants = len([v for v in self.variants if v not in self.seen])
        return max(0, self.total - self.done) * per_request + left_variants * overhead

    def _window(self, variant: str, w: logwindow.LogWindow) -> bool:
        if w.kind != "decode":
            return False
        changed = False
        if w.accept_len is not None:
            self.accept_len[variant] = float(w.accept_len)
            self._accept.setdefault(variant, deque(maxlen=SERIES_POINTS)).append(float(w.accept_len))
            changed = True
        if w.gen_throughput is not None:
            self.gen_tok_s[variant] = float(w.gen_throughput)
            self._tok_s.setdefault(variant, deque(maxlen=SERIES_POINTS)).append(float(w.gen_throughput))
            changed = True
        return changed

    def snapshot(self) -> ProgressSnapshot:
        span = (self._last_end - self._first_send) if self._first_send is not None and self._last_end else 0.0
        now = self.clock()
        return ProgressSnapshot(
            done=self.done,
            total=self.total,
            errors=self.errors,
            variant=self.variant,
            phase=self.phase,
            concurrency=self.concurrency,
            phase_done=self.phase_done,
            phase_total=self.phase_total,
            live_tok_s=self._tokens / span if span > 0 else None,
            accept_len=dict(self.accept_len),
            gen_tok_s=dict(self.gen_tok_s),
            accept_series={k: tuple(v) for k, v in self._accept.items()},
            tok_s_series={k: tuple(v) for k, v in self._tok_s.items()},
            started_at=self.started_at,
            at=now,
            eta_s=self._eta(now),
        )
