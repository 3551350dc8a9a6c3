"""The compute functions of the summary columns that compare a row with another: its own engine's baseline
at the same concurrency (speedup, step costs, the output check, the verdict). Each is fn(row, table) ->
value (or {column: value} for a function that fills several), `table.df` holding every row with the
columns computed before it (harness.analysis.columns; the declarations: harness.analysis.summary_columns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from harness.analysis import lossless as lossless_audit
from harness.analysis import outputs, verdicts
from harness.analysis.breakeven import step_break_even
from harness.analysis.breakeven import ttft_cost_ms as _ttft_cost_ms
from harness.analysis.engines_table import own_baseline
from harness.analysis.forced import is_forced
from harness.analysis.tune_model import predicted_speedup


@dataclass(eq=False)
class Table:
    """The summary being computed and the records it is computed from."""

    df: pd.DataFrame  # one row per (variant, concurrency); a column is added as its function runs
    requests: pd.DataFrame
    phases: pd.DataFrame
    windows: pd.DataFrame
    variants: dict[str, dict[str, Any]]
    outputs: pd.DataFrame | None = None
    min_steady_s: float = verdicts.DEFAULT_MIN_STEADY_S
    equivalence: float = verdicts.DEFAULT_EQUIVALENCE
    looks: dict[tuple[str, int], dict[str, Any]] | None = field(default=None)
    audit: lossless_audit.Audit | None = None  # audit.jsonl (harness.analysis.lossless)

    @property
    def baselines(self) -> pd.DataFrame:
        return self.df[self.df["baseline"].astype(bool)]

    @cached_property
    def profiles(self) -> pd.DataFrame:
        """Every phase's in-flight profile and steady state (verdicts.phase_profiles), once."""
        return verdicts.phase_profiles(self.requests)

    def phase_set(self, name: str, conc: int) -> set[str]:
        if self.phases.empty:
            return set()
        ph = self.phases
        return set(ph[(ph["variant"] == name) & (ph["concurrency"] == conc)]["phase"])

    def baseline_of(self, row: pd.Series) -> str | None:
        """The variant a speculative row is compared with: its engine's baseline at its concurrency; None
        for a baseline row or a row without one."""
        b = own_baseline(self.baselines, row)
        return None if b.empty or row["baseline"] else str(b.iloc[0]["variant"])


def _missing(value: object) -> bool:
    return value is None or bool(pd.isna(value))


def speedup(row: pd.Series, t: Table) -> float | None:
    b = own_baseline(t.baselines, row)
    if b.empty or not b.iloc[0]["tok_s"] or _missing(row["tok_s"]):
        return None
    base_tok_s = _paired_tok_s(t, str(b.iloc[0]["variant"]), row) or float(b.iloc[0]["tok_s"])
    return float(row["tok_s"]) / base_tok_s


def _paired_tok_s(t: Table, base: str, row: pd.Series) -> float | None:
    """The baseline's tok/s over the repeats this row has, where the baseline has more: under run.stop:
    decided the baseline goes on for the rows still open after this one stopped, and its later repeats are
    no part of this row's comparison (its interval pairs repeat with repeat; the point estimate must too,
    or a re-summary moves a row decided at an earlier look). None when the repeats are the same."""
    ph = t.phases
    if ph.empty or "repeat" not in ph:
        return None
    conc = int(row["concurrency"])
    at = ph[ph["concurrency"] == conc]
    reps = set(pd.to_numeric(at[at["variant"] == row["variant"]]["repeat"], errors="coerce").dropna())
    mine = at[at["variant"] == base]
    theirs = set(pd.to_numeric(mine["repeat"], errors="coerce").dropna())
    if not reps or theirs <= reps:
        return None
    mine = mine[pd.to_numeric(mine["repeat"], errors="coerce").isin(reps)]
    wall = float(pd.to_numeric(mine["wall_s"]).sum())
    return float(pd.to_numeric(mine["output_tokens"]).sum()) / wall if wall > 0 else None


def step_costs(row: pd.Series, t: Table) -> dict[str, Any]:
    """The verify and decode step at the batch both servers ran most (harness.analysis.breakeven)."""
    base = t.baseline_of(row)
    if base is None or not row["algorithm"]:
        return {}
    conc = int(row["concurrency"])
    found = step_break_even(t.windows, row["variant"], t.phase_set(row["variant"], conc), base,
                            t.phase_set(base, conc))
    found.pop("break_even_accept_len")  # the same number as step_ms_ratio: its own column, its own function
    return found


def break_even_accept_len(row: pd.Series, t: Table) -> float | None:
    """The step-cost ratio; where the step costs give none (an engine whose log has no per-step timing,
    vLLM's), accept_len / speedup from end-to-end tok/s."""
    if not _missing(row["step_ms_ratio"]):
        return row["step_ms_ratio"]
    al, sp = row["accept_len"], row["speedup"]
    if not bool(row["baseline"]) and row["algorithm"] and not _missing(al) and sp and not _missing(sp):
        return float(al) / float(sp)
    return None


def decode_step_speedup(row: pd.Series, t: Table) -> float | None:
    """accept_len x decode_step_ms / verify_step_ms: the speedup of steady decode at the step costs' batch,
    tune's prediction (tune_model.predicted_speedup) from this row's own measurements."""
    al, verify, decode = row["accept_len"], row["verify_step_ms"], row["decode_step_ms"]
    if _missing(al) or _missing(verify) or _missing(decode) or float(verify) <= 0:
        return None
    return predicted_speedup(float(al), float(verify), float(decode))


def ttft_cost_ms(row: pd.Series, t: Table) -> float | None:
    base = t.baseline_of(row)
    return None if base is None else _ttft_cost_ms(t.requests, row["variant"], base, int(row["concurrency"]))


def output_match(row: pd.Series, t: Table) -> dict[str, Any]:
    """The greedy output check against the baseline (harness.analysis.outputs)."""
    base = t.baseline_of(row)
    if base is None:
        return {}
    greedy = all(float(t.variants.get(n, {}).get("temperature") or 0.0) == 0.0
                 for n in (base, row["variant"]))
    return outputs.output_match(t.requests, t.outputs, base, row["variant"], int(row["concurrency"]), greedy)


def lossless(row: pd.Series, t: Table) -> dict[str, Any]:
    """The lossless audit against the baseline (harness.analysis.lossless); a baseline row: its control."""
    base = row["variant"] if row["baseline"] else t.baseline_of(row)
    if base is None or is_forced(row) \
            or float(t.variants.get(str(base), {}).get("temperature") or 0.0) != 0.0:
        return {}  # a forced copy's answers are not the model's
    return lossless_audit.row_audit(t.requests, t.outputs, t.audit, str(base), str(row["variant"]),
                                    int(row["concurrency"]))


def verdict(row: pd.Series, t: Table) -> dict[str, Any]:
    """The interval, the verdict and the guard (harness.analysis.verdicts.row_verdict)."""
    return verdicts.row_verdict(row, own_baseline(t.baselines, row), t.requests, t.phases, t.profiles,
                                min_steady_s=t.min_steady_s, equivalence=t.equivalence, looks=t.looks)


def slower_than_baseline(row: pd.Series, t: Table) -> bool | None:
    return None if row["baseline"] or row["verdict"] is None else row["verdict"] == "slower"


def compared_with(row: pd.Series, t: Table) -> str:
    return t.baseline_of(row) or ""
