"""`draftbench watch PLAN --variant V`: does the deployed drafter still accept as it did when it was promoted?

The recorded profile is speculation_profile.json of its promotion run (the last lineage entry of its drafters/
file, or `--profile`). A check measures the variant's acceptance per category: on a finished run (`--run DIR`,
no traffic: "on each run"), or with a short run of its own (the baseline and the variant, the profile run's
prompts, the plan's lowest concurrency, one repeat), now or every `--every` interval. A category alarms when
  drift      the interval of its accept length now lies wholly below the recorded interval (without a recorded
             interval: below 90 % of the recorded value);
  collapsed  its accept length is at most 1.05: the drafts are (nearly) never accepted (sglang-jax #1586).
Every check is appended to results/watch/<plan>-<variant>.jsonl (the TUI's Retrain section shows the last) and
yielded as a DriftCheck; an alarm is also an harness.common.events.Alarm, and the CLI's exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common.errors import InputError
from harness.retrain.profile import AcceptStats, SpeculationProfile, read_profile
from harness.retrain.weak_spots import overall, spots, variant_requests

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.targets.base import Target

COLLAPSED = 1.05
NO_INTERVAL_FACTOR = 0.9
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_every(text: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `1d` -> seconds."""
    m = _DURATION.match(text or "")
    if not m or float(m[1]) <= 0:
        raise InputError(None, None, "every", f"a duration like 30m, 1h or 90s, got {text!r}")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


@dataclass(frozen=True)
class DriftRow:
    category: str
    state: str  # "ok" | "drift" | "collapsed" | "better" | "not measured" | "new"
    recorded: float | None
    recorded_low: float | None
    recorded_high: float | None
    now: float | None
    now_low: float | None
    now_high: float | None
    requests: int

    @property
    def alarm(self) -> bool:
        return self.state in ("drift", "collapsed")

    def line(self) -> str:
        def iv(v: float | None, lo: float | None, hi: float | None) -> str:
            if v is None:
                return "-"
            return f"{v:.2f}" + (f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else "")

        return f"{self.category}\t{self.state}\trecorded " \
            f"{iv(self.recorded, self.recorded_low, self.recorded_high)}" \
            f"\tnow {iv(self.now, self.now_low, self.now_high)}\t{self.requests} requests"


@dataclass(frozen=True)
class DriftCheck:
    plan: str
    variant: str
    profile: str
    run_dir: str
    checked_at: str
    rows: tuple[DriftRow, ...]

    @property
    def alarm(self) -> bool:
        return any(r.alarm for r in self.rows)

    def summary(self) -> str:
        bad = [r for r in self.rows if r.alarm]
        if not bad:
            return f"{self.variant}: acceptance as recorded ({len(self.rows)} categories, run {self.run_dir})"
        return f"ALARM {self.variant}: " + "; ".join(
            f"{r.category} {r.state} ({r.now or 0:.2f} against recorded {r.recorded or 0:.2f})" for r in bad)

    def lines(self) -> list[str]:
        return [self.summary(), *("  " + r.line() for r in self.rows)]


def _row(category: str, rec: AcceptStats | None, now: AcceptStats | None) -> DriftRow:
    def vals(s: AcceptStats | None) -> tuple[float | None, float | None, float | None]:
        return (s.accept_len, s.accept_low, s.accept_high) if s is not None else (None, None, None)

    (r, rl, rh), (n, nl, nh) = vals(rec), vals(now)
    if n is None:
        state = "not measured"
    elif n <= COLLAPSED:
        state = "collapsed"
    elif r is None:
        state = "new"
    else:
        top = nh if nh is not None else n
        floor = rl if rl is not None else r * NO_INTERVAL_FACTOR
        bottom = nl if nl is not None else n
        ceiling = rh if rh is not None else r / NO_INTERVAL_FACTOR
        state = "drift" if top < floor else "better" if bottom > ceiling else "ok"
    return DriftRow(category, state, r, rl, rh, n, nl, nh, now.requests if now is not None else 0)


def compare(profile: SpeculationProfile, run_dir: str | Path, variant: str, plan_name: str = "",
            profile_path: str = "") -> DriftCheck:
    """The variant's acceptance per category in `run_dir` against the recorded profile."""
    rq = variant_requests(run_dir, variant)
    now = {s.category: AcceptStats.of(s) for s in spots(rq, "category")}
    cats = list(dict.fromkeys([*profile.categories, *now]))
    rows = [_row(c, profile.categories.get(c), now.get(c)) for c in cats]
    ref = overall(rq)
    rows.append(_row("(all)", profile.overall, AcceptStats.of(ref) if ref is not None else None))
    return DriftCheck(plan_name, variant, profile_path, str(run_dir), time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      tuple(rows))


def recorded_profile(plan: Plan, variant: str) -> str:
    """speculation_profile.json of the variant's drafter's last promotion."""
    v = plan.variant(variant)
    lineage = list(v.drafter.lineage) if v.drafter is not None else []
    found = next((e.profile for e in reversed(lineage) if e.profile), None)
    if not found:
        raise InputError(str(plan.source_path or ""), None, "variant",
                         f"{variant}'s drafter has no recorded profile "
                         "(none is written before a promotion by `draftbench retrain`): give --profile FILE, "
                         "a speculation_profile.json (harness.retrain.profile)")
    return found


def check_plan(plan: Plan, variant: str, profile: SpeculationProfile) -> Plan:
    """The plan cut to its baseline and the variant, the profile run's prompts (the plan's own suites when
    that run is gone), the lowest concurrency, one repeat."""
    from harness.inputs.config import Plan
    from harness.retrain.dataset import run_suites

    data = plan.resolved_dict()
    base = plan.baseline_of(plan.variant(variant)).name
    data["variants"] = [v for v in data["variants"] if v["name"] in (base, variant)]
    if (Path(profile.run) / "plan.resolved.json").exists():
        data["suites"] = [s.model_dump(mode="json", exclude_none=True) for s in run_suites(profile.run)]
    run = dict(data.get("run") or {})
    run.update(concurrency=[min(int(c) for c in run.get("concurrency") or [1])], repeats=1, max_repeats=1,
               stop="fixed", until_ci_pct=None)
    data["run"] = run
    data["name"] = plan.name + "-watch"
    data.pop("targets", None)
    out = Plan.model_validate(data)
    out._source_path = plan.source_path
    return out


def log_path(results_dir: str | Path, plan_name: str, variant: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{plan_name}-{variant}").strip("-")
    return Path(results_dir) / "watch" / f"{slug}.jsonl"


def record(results_dir: str | Path, check: DriftCheck) -> Path:
    path = log_path(results_dir, check.plan, check.variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(check)) + "\n")
    return path


def last_check(results_dir: str | Path, plan_name: str, variant: str) -> dict[str, Any] | None:
    path = log_path(results_dir, plan_name, variant)
    if not path.exists():
        return None
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


async def watch(plan: Plan, variant: str, *, results_dir: str | Path = "results", run_dir: str | None = None,
                profile: str | None = None, every_s: float | None = None, keep_going: bool = False,
                rounds: int | None = None, target: Target | None = None) -> AsyncIterator[Any]:
    """Checks (see the module): one on `run_dir`, else a check run now, and with `every_s` one every interval
    until an alarm (or for ever with `keep_going`; `rounds` caps the count). Yields the check runs' events,
    then a DriftCheck (and an Alarm event when it alarms) per check."""
    from harness.bench.runner import run_plan
    from harness.common import events as ev

    path = profile or recorded_profile(plan, variant)
    prof = read_profile(path)
    done = 0
    while True:
        started = time.monotonic()
        measured = run_dir
        if measured is None:
            events = run_plan(check_plan(plan, variant, prof), results_dir=results_dir, target=target)
            async with contextlib.aclosing(events):  # closing us stops the check run's servers
                async for e in events:
                    if isinstance(e, ev.RunStarted):
                        measured = e.run_dir
                    yield e
        check = compare(prof, str(measured), variant, plan.name, str(path))
        record(results_dir, check)
        yield check
        if check.alarm:
            yield ev.Alarm(variant, "error", "acceptance-drift", check.summary())
        done += 1
        if run_dir is not None or every_s is None or (check.alarm and not keep_going) or \
                (rounds is not None and done >= rounds):
            return
        await asyncio.sleep(max(0.0, every_s - (time.monotonic() - started)))
