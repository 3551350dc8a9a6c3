"""The promotion gate: may the new draft replace the variant's current drafter? Judged on the paired
evaluation run (baseline, current drafter, candidate on the same held-out prompts, the plan's concurrencies).

Per concurrency the candidate is compared with the *current drafter* with the summary's own interval methods
and verdict words (harness.analysis.verdicts.row_verdict, the current drafter standing where the baseline
usually stands): faster / slower / equivalent / undecided / too-short. The rule (the user's choice):
  faster                              decided faster at every concurrency the plan lists;
  faster-or-equivalent-higher-accept  faster, or equivalent with an accept length decidedly higher (the 95 %
                                      interval of the accept-length ratio, paired over prompts, above 1.00).
Between two servers of the same shape (same_step_cost: a retrained draft keeps the head's) only the accept
length can move the speed, so a `faster` row whose paired accept-length interval does not lie above 1.00 is
refused as noise between phases (CI once promoted a retrain with accept length 1.30 against 1.30 that way).
Where the summary has the lossless audit's `lossless_verdict` column, every candidate row must read
`lossless`; where it is absent or empty the audit is skipped and the result says so. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from harness.analysis import stats

Rule = Literal["faster", "faster-or-equivalent-higher-accept"]
RULES: tuple[Rule, ...] = ("faster", "faster-or-equivalent-higher-accept")
LOSSLESS_PASS = "lossless"


@dataclass(frozen=True)
class GateRow:
    concurrency: int
    verdict: str  # the candidate against the current drafter; "missing" without rows
    speedup: float | None  # candidate tok/s over the current drafter's
    low: float | None
    high: float | None
    reason: str
    accept_ratio: float | None  # candidate accept length over the current drafter's, paired over prompts
    accept_low: float | None
    accept_high: float | None
    vs_baseline: str | None  # the candidate's own summary verdict against the baseline
    lossless: str | None
    passed: bool
    why: str

    def line(self) -> str:
        sp = f"{self.speedup:.2f}x" if self.speedup is not None else "-"
        ci = f" [{self.low:.2f}-{self.high:.2f}]" if self.low is not None and self.high is not None else ""
        al = f", accept len x{self.accept_ratio:.2f}" if self.accept_ratio is not None else ""
        al += f" [{self.accept_low:.2f}-{self.accept_high:.2f}]" if self.accept_low is not None \
            and self.accept_high is not None else ""
        base = f", vs baseline {self.vs_baseline}" if self.vs_baseline else ""
        outcome = 'pass' if self.passed else 'fail'
        return f"c{self.concurrency}: {self.verdict} {sp}{ci}{al}{base} -> {outcome}: {self.why}"


@dataclass(frozen=True)
class GateResult:
    passed: bool
    rule: str
    candidate: str
    current: str
    rows: tuple[GateRow, ...]
    lossless: str  # "passed", "failed: ...", or "skipped: ..."

    def lines(self) -> list[str]:
        head = (f"gate ({self.rule}): {self.candidate} against {self.current}: "
                + ("PASSED, promote" if self.passed else "REFUSED, nothing changes"))
        return [head, *("  " + r.line() for r in self.rows), f"  lossless audit: {self.lossless}"]

    @property
    def reason(self) -> str:
        """Why it was refused (the first failing row), or "" when it passed."""
        bad = [r for r in self.rows if not r.passed]
        if bad:
            return f"c{bad[0].concurrency}: {bad[0].why}"
        return "" if self.passed else f"lossless audit {self.lossless}"


def _accept_ratio(requests: pd.DataFrame, a: str, b: str, conc: int) -> tuple[float, float, float] | None:
    """(estimate, low, high) of a's accept length over b's, paired over the prompts both answered."""
    def per_prompt(name: str) -> pd.DataFrame:
        r = requests[(requests["variant"] == name) & (requests["concurrency"] == conc)
                     & requests["ok"].eq(True)]
        v = pd.to_numeric(r["spec_verify_ct"], errors="coerce") if "spec_verify_ct" in r \
            else pd.Series(dtype=float)
        e = pd.to_numeric(r["output_tokens"], errors="coerce") - 1
        r = r.assign(_v=v, _e=e)
        r = r[r["_v"].notna() & (r["_v"] > 0) & r["_e"].notna()]
        return r.groupby(["suite", "prompt_id"])[["_e", "_v"]].sum()

    pa, pb = per_prompt(a), per_prompt(b)
    common = pa.index.intersection(pb.index)
    if len(common) < 2:
        return None
    pa, pb = pa.loc[common], pb.loc[common]
    return stats.paired_bootstrap_ratio(pa["_e"].to_numpy(float), pa["_v"].to_numpy(float),
                                        pb["_e"].to_numpy(float), pb["_v"].to_numpy(float))


def _lossless_cell(summary: pd.DataFrame, candidate: str, conc: int) -> str | None:
    if "lossless_verdict" not in summary:
        return None
    row = summary[(summary["variant"].astype(str) == candidate) & (summary["concurrency"] == conc)]
    if row.empty:
        return None
    v = row.iloc[0]["lossless_verdict"]
    text = "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip()
    return text if text and text not in ("-", "n/a", "nan") else None


def judge(run_dir: str | Path, candidate: str, current: str, concurrencies: list[int], rule: Rule = "faster",
          looks: dict[int, dict[str, Any]] | None = None) -> GateResult:
    """The gate's answer for `candidate` against `current` in a finished evaluation run. `looks`: per
    concurrency, the gate's stopping-rule look its row is judged at (level, repeats: harness.retrain.loop);
    without one a row is judged at 95 % over every repeat."""
    from harness.analysis import verdicts as vd
    from harness.analysis.acceptance import requests_with_spec
    from harness.analysis.goodput import closed_loop
    from harness.analysis.summary import load_summary, read_tables, summarise_dir

    if rule not in RULES:
        raise ValueError(f"rule: one of {', '.join(RULES)}, not {rule!r}")
    run_dir = Path(run_dir)
    requests, phases, windows, variants, probe = read_tables(run_dir)
    same_shape = same_step_cost(variants.get(candidate), variants.get(current))
    requests, phases, windows, probe = closed_loop(requests, phases, windows, probe)
    summary = load_summary(run_dir)
    if summary.empty:
        summary = summarise_dir(run_dir)
    settings = run_settings(run_dir)
    profiles = vd.phase_profiles(requests)
    spec_rq = requests_with_spec(requests, probe) if not requests.empty else requests
    rows, audits = [], []
    for conc in concurrencies:
        sel = summary[summary["concurrency"] == conc]
        cand = sel[sel["variant"].astype(str) == candidate]
        cur = sel[sel["variant"].astype(str) == current]
        if cand.empty or cur.empty:
            rows.append(GateRow(conc, "missing", None, None, None,
                                "no rows for both drafters at this concurrency", None, None, None, None, None,
                                False, "the evaluation has no rows to compare here"))
            continue
        tc, tr = _float(cand.iloc[0].get("tok_s")), _float(cur.iloc[0].get("tok_s"))
        speedup = tc / tr if tc is not None and tr and tr > 0 else None
        row: dict[str, Any] = {"variant": candidate, "concurrency": conc, "speedup": speedup,
                               "baseline": False}
        ref = pd.DataFrame({"variant": [current], "concurrency": [conc]})
        look = (looks or {}).get(conc)
        got = vd.row_verdict(row, ref, requests, phases, profiles,
                             min_steady_s=float(settings.get("min_steady_s", vd.DEFAULT_MIN_STEADY_S)),
                             equivalence=float(settings.get("equivalence", vd.DEFAULT_EQUIVALENCE)),
                             looks={(candidate, conc): look} if look else None)
        verdict = str(got.get("verdict") or "undecided")
        acc = _accept_ratio(spec_rq, candidate, current, conc)
        lossless = _lossless_cell(summary, candidate, conc)
        audits.append(lossless)
        passed, why = _rule(rule, verdict, acc, str(got.get("verdict_reason") or ""), same_shape=same_shape)
        if passed and lossless is not None and lossless != LOSSLESS_PASS:
            passed, why = False, f"lossless audit reads {lossless!r}"
        rows.append(GateRow(conc, verdict, speedup, _float(got.get("speedup_ci_low")),
                            _float(got.get("speedup_ci_high")), str(got.get("verdict_reason") or ""),
                            acc[0] if acc else None, acc[1] if acc else None, acc[2] if acc else None,
                            str(cand.iloc[0].get("verdict") or "") or None, lossless, passed, why))
    present = [a for a in audits if a is not None]
    if not present:
        audit = "skipped: the evaluation run has no lossless_verdict" if "lossless_verdict" not in summary \
            else "skipped: no audit for the candidate's rows"
    elif all(a == LOSSLESS_PASS for a in present):
        audit = "passed"
    else:
        audit = "failed: " + ", ".join(sorted(set(a for a in present if a != LOSSLESS_PASS)))
    passed = bool(rows) and all(r.passed for r in rows)
    return GateResult(passed, rule, candidate, current, tuple(rows), audit)


SHAPE_FIELDS = ("engine", "algorithm", "num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph",
                "forced_acceptance")


def same_step_cost(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Do two variants' servers pay the same per step (variants.jsonl: the same engine,
    algorithm, steps, top-k, draft tokens and CUDA graphs)? A retrained draft keeps the head's
    shape, so between such two servers only the accept length can move the speed."""
    if not a or not b:
        return False
    return all(a.get(k) == b.get(k) for k in SHAPE_FIELDS)


def _rule(rule: Rule, verdict: str, acc: tuple[float, float, float] | None, reason: str, *,
          same_shape: bool = False) -> tuple[bool, str]:
    if verdict == "faster":
        if same_shape and acc is not None and acc[1] <= 1.0:
            # same step cost and no decided acceptance gain: the speed difference came from the
            # phases' timing (a load change on the machine between the two arms), not the drafter
            return False, (f"decided faster, but the accept length is not decidedly higher "
                           f"(x{acc[0]:.2f}, low {acc[1]:.2f}) and both servers pay the same per "
                           "step: a speed gain that acceptance cannot explain is noise between "
                           "the phases, not the new draft")
        return True, "decided faster than the current drafter"
    if verdict == "equivalent" and rule == "faster-or-equivalent-higher-accept":
        if acc is not None and acc[1] > 1.0:
            return True, f"equivalent speed, accept length decidedly higher (x{acc[0]:.2f}, low {acc[1]:.2f})"
        low = f" (low end {acc[1]:.2f})" if acc is not None else " (no paired accept lengths)"
        return False, f"equivalent speed and the accept length is not decidedly higher{low}"
    wanted = "faster" if rule == "faster" else "faster, or equivalent with a higher accept length"
    return False, f"{verdict}, not {wanted}" + (f": {reason}" if reason else "")


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The run's own `run:` settings (plan.resolved.json), so the gate judges as the run's summary did."""
    import json

    try:
        run = json.loads((run_dir / "plan.resolved.json").read_text(encoding="utf-8")).get("run", {})
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in run.items() if v is not None} if isinstance(run, dict) else {}


def _float(v: object) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else f
