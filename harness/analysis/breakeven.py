"""Break-even accept length from step costs, and the TTFT cost of speculation (docs/metrics.md).

A speculative server commits AL tokens per request per verify step of Tv ms; the baseline one token per
decode step of Td ms at the same running batch. Decode speeds are equal at AL = Tv / Td: that ratio is
the break-even accept length (`step_ms_ratio`; the two columns hold the same number, the second under the
name the tuner uses). Prefill, queueing and the tail do not enter it; their cost shows as
`ttft_cost_ms` (paired mean TTFT difference against the baseline). At concurrency > 1 the batch differs
over a phase: the ratio is taken at the batch size the variant's decode windows ran at most often among
those both servers have step times for (`break_even_batch`).

The forced-acceptance sweep (`draftbench breakeven`) measures the same point end to end: tok/s against
measured accept length, interpolated to the baseline's tok/s (`interpolate_break_even`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.steps import step_ms_by_batch, windows_by_batch


def step_break_even(windows: pd.DataFrame, variant: str, variant_phases: set[str], baseline: str,
                    baseline_phases: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"break_even_accept_len": None, "break_even_batch": None, "step_ms_ratio": None,
                           "verify_step_ms": None, "decode_step_ms": None}
    if windows is None or windows.empty:
        return out
    sv = step_ms_by_batch(windows, variant, variant_phases)
    sb = step_ms_by_batch(windows, baseline, baseline_phases)
    common = [b for b in sv if b in sb and sb[b] > 0]
    if not common:
        return out
    counts = windows_by_batch(windows, variant, variant_phases)
    batch = max(common, key=lambda b: (counts.get(b, 0), b))
    ratio = sv[batch] / sb[batch]
    out.update(break_even_accept_len=ratio, break_even_batch=batch, step_ms_ratio=ratio,
               verify_step_ms=sv[batch], decode_step_ms=sb[batch])
    return out


def ttft_cost_ms(requests: pd.DataFrame, variant: str, baseline: str, concurrency: int) -> float | None:
    """Mean over prompts both servers answered of (variant TTFT − baseline TTFT), in ms; without any
    common prompt, the difference of the two means."""
    if requests.empty or variant == baseline:
        return None
    r = requests[(requests["concurrency"] == concurrency) & requests["ok"].eq(True)]
    a = pd.to_numeric(r[r["variant"] == variant].set_index(["phase", "request_id"])["ttft_ms"],
                      errors="coerce")
    b = pd.to_numeric(r[r["variant"] == baseline].set_index(["phase", "request_id"])["ttft_ms"],
                      errors="coerce")
    a, b = a[~a.index.duplicated(keep="last")].dropna(), b[~b.index.duplicated(keep="last")].dropna()
    common = a.index.intersection(b.index)
    if len(common):
        return float((a.loc[common] - b.loc[common]).mean())
    if len(a) and len(b):
        return float(a.mean() - b.mean())
    return None


def interpolate_break_even(points: Sequence[tuple[float, float]], baseline_tok_s: float) -> float | None:
    """The accept length at which tok/s equals the baseline's, by linear interpolation over
    (measured accept length, tok/s) points sorted by accept length; linear extrapolation from the nearest
    two points when the baseline lies outside them. None with fewer than two distinct points."""
    pts = sorted({(float(a), float(t)) for a, t in points if a == a and t == t})
    if len(pts) < 2 or len({a for a, _ in pts}) < 2:
        return None
    for (a0, t0), (a1, t1) in zip(pts, pts[1:], strict=False):
        if min(t0, t1) <= baseline_tok_s <= max(t0, t1) and t1 != t0:
            return a0 + (baseline_tok_s - t0) * (a1 - a0) / (t1 - t0)
    (a0, t0), (a1, t1) = (pts[0], pts[1]) if baseline_tok_s < pts[0][1] else (pts[-2], pts[-1])
    if t1 == t0 or a1 == a0:
        return None
    return a0 + (baseline_tok_s - t0) * (a1 - a0) / (t1 - t0)


BREAKEVEN_COLUMNS = ["row", "concurrency", "variant", "forced_acceptance", "accept_len", "tok_s", "speedup",
                     "baseline_tok_s", "break_even_measured", "break_even_steps", "break_even_batch",
                     "break_even_extrapolated", "accept_len_cap"]


def _number(value: object) -> float | None:
    """A table cell as a number (None when empty or not one)."""
    n = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return float(n) if pd.notna(n) else None


def accept_len_cap(num_steps: object) -> int | None:
    """The most tokens one verify step can commit: num_steps drafts along the deepest branch plus the bonus
    token (a chain or a tree alike); None when num_steps is not known."""
    n = _number(num_steps)
    return int(n) + 1 if n is not None and n >= 1 else None


def step_cost_at_batch(windows: pd.DataFrame | None, phases: pd.DataFrame | None, copies: Sequence[str],
                       baseline: str, batch: int) -> float | None:
    """Median over the forced copies of (verify step / baseline decode step), both at running batch `batch`,
    from the windows of the phases at concurrency `batch`; None when a server has no window at that batch."""
    if windows is None or windows.empty or phases is None or phases.empty:
        return None

    def at(name: str) -> float | None:
        tags = set(phases[(phases["variant"] == name) & (phases["concurrency"] == batch)]["phase"])
        return step_ms_by_batch(windows, name, tags).get(batch)

    base = at(baseline)
    if not base:
        return None
    ratios = [v / base for v in (at(c) for c in copies) if v is not None]
    return float(pd.Series(ratios).median()) if ratios else None


def forced_table(summary: pd.DataFrame, variant: str, baseline: str, windows: pd.DataFrame | None = None,
                 phases: pd.DataFrame | None = None) -> pd.DataFrame:
    """From the summary of a forced-acceptance run: one "point" row per forced copy of `variant` and
    concurrency (measured accept length, tok/s), then per concurrency a "break-even" row: the measured
    accept length at which tok/s equals the baseline's (interpolated) next to the step-cost estimate
    (median over the copies: the verify step does not depend on what is accepted). The step cost is the
    row's own: at running batch == its concurrency when `windows`/`phases` hold steps there, else the
    summary's (at the batch its windows ran most, named in `break_even_batch`)."""
    rows: list[dict[str, Any]] = []
    if summary.empty:
        return pd.DataFrame(columns=BREAKEVEN_COLUMNS)
    forced = pd.to_numeric(summary.get("forced_acceptance"), errors="coerce")
    copies = summary[forced.notna() & summary["variant"].astype(str).str.startswith(f"{variant}-al")]
    for conc in sorted({int(c) for c in copies["concurrency"]}):
        b = summary[(summary["variant"] == baseline) & (summary["concurrency"] == conc)]
        btok = float(b.iloc[0]["tok_s"]) if not b.empty and pd.notna(b.iloc[0]["tok_s"]) else None
        here = copies[copies["concurrency"] == conc].sort_values("forced_acceptance")
        points = []
        for _, r in here.iterrows():
            acc = pd.to_numeric(r["accept_len"], errors="coerce")
            tok = pd.to_numeric(r["tok_s"], errors="coerce")
            rows.append({"row": "point", "concurrency": conc, "variant": r["variant"],
                         "forced_acceptance": float(r["forced_acceptance"]), "accept_len": acc, "tok_s": tok,
                         "speedup": tok / btok if btok else None, "baseline_tok_s": btok})
            if pd.notna(acc) and pd.notna(tok):
                points.append((float(acc), float(tok)))
        steps = pd.to_numeric(here.get("break_even_accept_len"), errors="coerce").dropna()
        batch = pd.to_numeric(here.get("break_even_batch"), errors="coerce").dropna()
        own = step_cost_at_batch(windows, phases, list(here["variant"].astype(str)), baseline, conc)
        toks = [t for _, t in points]
        rows.append({"row": "break-even", "concurrency": conc, "variant": variant, "forced_acceptance": True,
                     "baseline_tok_s": btok,
                     "break_even_measured": interpolate_break_even(points, btok) if btok else None,
                     "break_even_extrapolated": bool(btok and toks and not min(toks) <= btok <= max(toks)),
                     "accept_len_cap": accept_len_cap(here["num_steps"].iloc[0]) if "num_steps" in here
                     and len(here) else None,
                     "break_even_steps": own if own is not None
                     else float(steps.median()) if len(steps) else None,
                     "break_even_batch": conc if own is not None else int(batch.mode().iloc[0]) if len(batch)
                     else None})
    return pd.DataFrame(rows, columns=BREAKEVEN_COLUMNS)


def _flag(value: object) -> bool:
    """A bool cell: the table as built, or breakeven.csv as harness.studies.breakeven.read_forced_table parses
    it (pd.NA: no)."""
    return isinstance(value, bool | np.bool_) and bool(value)


def render_forced_table(table: pd.DataFrame) -> str:
    """The breakeven table as text (forced-acceptance runs: their outputs are not the model's)."""
    def f(v: object, fmt: str) -> str:
        return format(float(v), fmt) if v is not None and pd.notna(v) and not isinstance(v, bool) else "-"

    lines = [f"{'conc':>4}  {'variant':<24} {'forced AL':>9} {'measured AL':>11} {'tok/s':>8} {'speedup':>7}"]
    for _, r in table.iterrows():
        conc = int(r["concurrency"])
        if r["row"] == "point":
            lines.append(f"{conc:>4}  {str(r['variant']):<24} {f(r['forced_acceptance'], '.2f'):>9} "
                         f"{f(r['accept_len'], '.2f'):>11} {f(r['tok_s'], '.1f'):>8} "
                         f"{f(r['speedup'], '.2f'):>6}x")
            continue
        if pd.isna(r["break_even_batch"]):
            steps = "from step costs -"
        else:
            b = int(r["break_even_batch"])
            steps = f"from step costs {f(r['break_even_steps'], '.2f')} (steps at batch {b}" + (
                ")" if b == conc else f": no decode windows at batch {conc} to compare)")
        measured = f(r["break_even_measured"], ".2f")
        if _flag(r.get("break_even_extrapolated")) and measured != "-":
            here = table[(table["row"] == "point") & (table["concurrency"] == r["concurrency"])]
            acc = pd.to_numeric(here["accept_len"], errors="coerce").dropna()
            upto = math.ceil(float(r["break_even_measured"]) * 2 + 1) / 2  # the next half above it, plus 0.5
            span = f", accept len {acc.min():.2f}-{acc.max():.2f}" if len(acc) else ""
            measured = (f"extrapolated {measured} (the baseline's tok/s lies beyond every forced "
                        f"point{span}: --accept-lens up to ~{upto:g} measures it)")
        else:
            measured = f"measured {measured} (tok/s end to end at concurrency {conc})"
        lines.append(f"{conc:>4}  break-even accept length at concurrency {conc}: {measured}, "
                     f"{steps}; baseline {f(r['baseline_tok_s'], '.1f')} tok/s at concurrency {conc}")
        cap = _number(r.get("accept_len_cap"))
        need = [x for x in (_number(r["break_even_measured"]), _number(r["break_even_steps"]))
                if x is not None]
        if cap is not None and need and min(need) > cap:
            lines.append(f"{conc:>4}  unreachable: this config commits at most {int(cap)} tokens per verify "
                         f"step (num_steps {int(cap) - 1} + the bonus token), below the break-even "
                         f"{min(need):.2f}: no drafter makes it beat the baseline at concurrency {conc}")
    lines.append("each point: accept length and tok/s measured at its row's concurrency (conc)")
    lines.append("forced acceptance: every output above is forced, not the model's; use it for speed only")
    return "\n".join(lines)
