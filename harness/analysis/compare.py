"""Two runs side by side (`draftbench compare A B`, the TUI's comparison): each metric in A, in B and B's
change in %, and for tok/s whether the change is real: the ratio B/A with a 95 % interval and a verdict.

The interval comes from data both runs hold (harness.analysis.stats does the arithmetic), by the summary's
own rules (harness.analysis.verdicts):
- at concurrency 1, paired: the requests both runs made (same phase and request id: the same prompt, turn and
  repeat), a bootstrap over them of B's Σtokens/Σtime over A's, so each prompt's difficulty cancels out;
- above concurrency 1, repeats: the phases' tok/s of each run (at least two repeats each), resampled apart.
  Paired requests of one repeat each are shown there but decide nothing: a batch's requests share their
  run's moment, so they cannot see the noise between runs (two runs of the same config on the stand-in
  gave 1.00x [1.00-1.00], "B faster" at +0.1 %);
- without either: over each run's repeats where both have two.
Like the summary's speedup interval it is relative: its factors are placed around the ratio of the two
runs' tok/s. Verdict: `equivalent` when the interval lies inside the +-3 % band (DEFAULT_EQUIVALENCE), else
`B faster` / `B slower` when it leaves out 1.00, `undecided` when it holds 1.00 or cannot see the noise
between runs, `n/a` without the data for an interval. Forced-acceptance rows are left out unless asked
for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.analysis.forced import is_forced, without_forced
from harness.analysis.report import fmt_cell
from harness.analysis.stats import paired_bootstrap_ratio, two_sample_bootstrap_ratio
from harness.analysis.summary import BOOL_COLUMNS, parse_bools
from harness.analysis.verdicts import DEFAULT_EQUIVALENCE

if TYPE_CHECKING:
    from harness.analysis.runs import LoadedRun, RunInfo

COMPARE_METRICS = [
    ("accept_len", "accept len", "{:.2f}"),
    ("tok_s", "tok/s", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}"),
    ("speedup", "speedup", "{:.2f}x"),
]
CHANGE_COLUMNS = ["tok_s_ratio", "tok_s_ratio_low", "tok_s_ratio_high", "tok_s_change", "tok_s_change_method"]
FORCED_MARK = " (FORCED)"
ONE_REPEAT = "one repeat cannot see the noise between runs"
LEGEND = ("B/A: B's tok/s over A's; 95% CI: at concurrency 1 paired over the requests both runs made (same "
          "prompt, turn, repeat), above it over each run's repeats (two each at least: with one, "
          f"{ONE_REPEAT}, and the paired CI shown decides nothing); change: equivalent when the CI lies "
          f"inside +-{DEFAULT_EQUIVALENCE:.0%}, else B faster / B slower when it leaves out 1.00, undecided "
          "when it holds 1.00, n/a without per-request or per-repeat data in both runs")


@dataclass(eq=False)
class Comparison:
    a: RunInfo
    b: RunInfo
    # variant, concurrency, <metric>_a, <metric>_b, <metric>_delta_pct, then CHANGE_COLUMNS
    table: pd.DataFrame


def _csv(path: Path) -> pd.DataFrame:
    """requests.csv or phases.csv, their True/False cells as bools (as the summary reads them)."""
    try:
        return parse_bools(pd.read_csv(path), BOOL_COLUMNS.get(path.name, ()))
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _requests(df: pd.DataFrame, variant: str, conc: int) -> pd.DataFrame:
    need = {"variant", "concurrency", "phase", "request_id", "ok", "output_tokens", "e2e_ms"}
    if df.empty or not need <= set(df.columns):
        return pd.DataFrame()
    r = df[(df["variant"].astype(str) == variant)
           & (pd.to_numeric(df["concurrency"], errors="coerce") == conc) & df["ok"].eq(True)]
    r = r.assign(tok=pd.to_numeric(r["output_tokens"], errors="coerce"),
                 t=pd.to_numeric(r["e2e_ms"], errors="coerce"))
    r = r[(r["tok"] > 0) & (r["t"] > 0)]
    return r.drop_duplicates(["phase", "request_id"], keep="last").set_index(["phase", "request_id"])


def _phase_rates(df: pd.DataFrame, variant: str, conc: int) -> np.ndarray:
    if df.empty or not {"variant", "concurrency", "output_tokens", "wall_s"} <= set(df.columns):
        return np.array([])
    p = df[(df["variant"].astype(str) == variant)
           & (pd.to_numeric(df["concurrency"], errors="coerce") == conc)]
    tok = pd.to_numeric(p["output_tokens"], errors="coerce")
    wall = pd.to_numeric(p["wall_s"], errors="coerce")
    rates = (tok / wall)[(tok > 0) & (wall > 0)]
    return rates.to_numpy(dtype=float)


def change_interval(a_dir: str | Path, b_dir: str | Path, variant: str, conc: int
                    ) -> tuple[float, float, str] | None:
    """(low factor, high factor, method) of B's tok/s over A's for one row; None without the data. A method
    ending in ONE_REPEAT is an interval that decides nothing (above concurrency 1, one repeat a side)."""
    pa, pb = _phase_rates(_csv(Path(a_dir) / "phases.csv"), variant, conc), \
        _phase_rates(_csv(Path(b_dir) / "phases.csv"), variant, conc)
    if conc > 1 and len(pa) >= 2 and len(pb) >= 2:
        got = two_sample_bootstrap_ratio(pb, pa)
        if got is not None:
            return got[1] / got[0], got[2] / got[0], f"repeats, {len(pa)} and {len(pb)}"
    ra, rb = _requests(_csv(Path(a_dir) / "requests.csv"), variant, conc), \
        _requests(_csv(Path(b_dir) / "requests.csv"), variant, conc)
    common = ra.index.intersection(rb.index) if not ra.empty and not rb.empty else []
    got, method = None, ""
    if len(common) >= 2:
        a, b = ra.loc[common], rb.loc[common]
        got = paired_bootstrap_ratio(b["tok"].to_numpy(), b["t"].to_numpy(), a["tok"].to_numpy(),
                                     a["t"].to_numpy())
        method = f"paired, {len(common)} requests" + (f"; {ONE_REPEAT}" if conc > 1 else "")
    if got is None:
        got = two_sample_bootstrap_ratio(pb, pa)
        method = f"repeats, {len(pa)} and {len(pb)}"
    if got is None:
        return None
    est, low, high = got
    return low / est, high / est, method


def _verdict(low: float, high: float, method: str = "") -> str:
    """The summary's order (harness.analysis.verdicts._verdict): no decision from an interval blind to the
    noise between runs, then the band, then the side of 1.00."""
    if method.endswith(ONE_REPEAT):
        return "undecided"
    if 1.0 - DEFAULT_EQUIVALENCE <= low and high <= 1.0 + DEFAULT_EQUIVALENCE:
        return "equivalent"
    return "B faster" if low > 1.0 else "B slower" if high < 1.0 else "undecided"


def compare_runs(a: LoadedRun, b: LoadedRun, *, forced: bool = False) -> Comparison:
    """Two runs side by side per (variant, concurrency): each metric in A, in B, B's change in %, and the
    tok/s ratio with its interval and verdict. Forced-acceptance rows are left out unless `forced` (then their
    variant is labelled FORCED)."""
    keys = ["variant", "concurrency"]
    cols = [m for m, _, _ in COMPARE_METRICS]

    def side(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return pd.DataFrame(columns=keys + cols)
        if not forced:
            return without_forced(df)[keys + cols]
        marked = [f"{v}{FORCED_MARK}" if is_forced(r) else str(v) for v, (_, r) in
                  zip(df["variant"], df.iterrows(), strict=True)]
        return df.assign(variant=marked)[keys + cols]

    left, right = side(a.summary), side(b.summary)
    merged = left.merge(right, on=keys, how="outer", suffixes=("_a", "_b")).sort_values(keys)
    for m in cols:
        va = pd.to_numeric(merged[f"{m}_a"], errors="coerce")
        vb = pd.to_numeric(merged[f"{m}_b"], errors="coerce")
        merged[f"{m}_delta_pct"] = (vb / va - 1.0) * 100.0
    merged = merged.reset_index(drop=True)
    changes: list[dict[str, Any]] = []
    for _, r in merged.iterrows():
        ta, tb = pd.to_numeric(r["tok_s_a"], errors="coerce"), pd.to_numeric(r["tok_s_b"], errors="coerce")
        row: dict[str, Any] = dict.fromkeys(CHANGE_COLUMNS)
        if pd.notna(ta) and pd.notna(tb) and ta > 0:
            ratio = float(tb / ta)
            row.update(tok_s_ratio=ratio, tok_s_change="n/a")
            got = change_interval(a.info.run_dir, b.info.run_dir, str(r["variant"]).removesuffix(FORCED_MARK),
                                  int(r["concurrency"]))
            if got is not None:
                low, high = ratio * got[0], ratio * got[1]
                row.update(tok_s_ratio_low=low, tok_s_ratio_high=high,
                           tok_s_change=_verdict(low, high, got[2]), tok_s_change_method=got[2])
        changes.append(row)
    merged = pd.concat([merged, pd.DataFrame(changes, columns=CHANGE_COLUMNS, index=merged.index)], axis=1)
    return Comparison(a.info, b.info, merged)


def comparison_rows(c: Comparison) -> tuple[list[str], list[tuple[str, tuple[str, ...]]]]:
    headers = ["variant", "conc"]
    for _, label, _ in COMPARE_METRICS:
        headers += [f"{label} A", f"{label} B", "Δ%"]
    headers += ["tok/s B/A", "95% CI", "change"]
    rows = []
    for _, r in c.table.iterrows():
        cells = [str(r["variant"]), fmt_cell(r["concurrency"], "{:.0f}")]
        for m, _, spec in COMPARE_METRICS:
            cells += [
                fmt_cell(r[f"{m}_a"], spec),
                fmt_cell(r[f"{m}_b"], spec),
                fmt_cell(r[f"{m}_delta_pct"], "{:+.1f}"),
            ]
        low, high = r.get("tok_s_ratio_low"), r.get("tok_s_ratio_high")
        given = fmt_cell(low, "{}") != "-" and fmt_cell(high, "{}") != "-"
        ci = f"{float(low):.2f}-{float(high):.2f}" if given else "-"
        cells += [fmt_cell(r.get("tok_s_ratio"), "{:.2f}x"), ci, fmt_cell(r.get("tok_s_change"), "{}")]
        rows.append((f"{r['variant']}@{r['concurrency']}", tuple(cells)))
    return headers, rows
