"""`draftbench tune` by context length: the best config per context bucket where they differ, and a warning
when the suites' context lengths do not cover the deployment's (`run.context_buckets`).

The wide run's per-request histograms are split over the context buckets each request's decode tokens fell
in (prompt + tokens generated so far, in proportion), so each bucket has its own chain prediction
AL_b(k) = Σ_j h_b[j] (min(j, k) + 1) / Σ_j h_b[j] (tune_model's formula); with the measured step costs that
gives a predicted speedup per (config, concurrency, bucket): tune_by_context.csv. The step costs are the
suites' own: on a GPU a verify step at 32k context costs more than at 1k, so a long bucket's prediction is
of its acceptance, at the suites' step cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from harness.analysis import tune_model as tm
from harness.analysis.acceptance import requests_with_spec
from harness.analysis.by_context import Buckets
from harness.analysis.by_context_report import COVER_STEPS
from harness.analysis.summary import read_tables
from harness.analysis.tune_model import Config, parse_histogram

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneRun

CONTEXT_FILE = "tune_by_context.csv"
CONTEXT_COLUMNS = ["num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph", "concurrency", "bucket", "lo",
                   "hi", "verify_steps", "accept_len_pred", "step_ms", "speedup_pred", "step_source",
                   "sampling"]


def bucket_histograms(run_dir: Path, variant: str, edges: list[int]) -> dict[str, list[float]]:
    """Per context bucket, the summed correct-drafts histograms of `variant`'s requests, each request's split
    over the buckets its decode tokens fell in."""
    requests, probe = read_tables(run_dir, ("requests.csv", "spec_probe.csv"))
    if requests.empty:
        return {}
    req = requests_with_spec(requests[requests["variant"].astype(str) == variant], probe)
    buckets = Buckets(tuple(edges))
    out: dict[str, list[float]] = {}
    for rec in req[req["ok"].eq(True)].to_dict("records"):
        h, prompt, completion = parse_histogram(rec.get("spec_histogram")), rec.get("prompt_tokens"), \
            rec.get("output_tokens")
        if not h or prompt is None or pd.isna(prompt) or completion is None or pd.isna(completion):
            continue
        decode = max(1, int(completion) - 1)
        for i, n in buckets.split(int(prompt) + 1, decode):
            acc = out.setdefault(buckets.labels[i], [])
            if len(acc) < len(h):
                acc.extend([0.0] * (len(h) - len(acc)))
            for j, c in enumerate(h):
                acc[j] += c * n / decode
    return out


def accept_len_at(h: list[float], k: int) -> float | None:
    n = sum(h)
    return sum(c * (min(j, k) + 1) for j, c in enumerate(h)) / n if n > 0 else None


def context_rows(t: TuneRun, measured: dict[Config, dict[int, float]],
                 base: dict[int, float]) -> pd.DataFrame:
    """One row per (chain config, concurrency, context bucket the wide run reached): tune_by_context.csv."""
    from harness.inputs.sampling import sampling_label

    edges = list(t.plan.run.context_buckets)
    hists = bucket_histograms(t.dir / "wide", t.wide_name, edges)
    bounds = dict(zip(Buckets(tuple(edges)).labels, Buckets(tuple(edges)).bounds, strict=True))
    sampling = sampling_label(t.tuned.sampling, t.plan.run.temperature)
    rows = []
    for cfg in t.grid:
        if cfg.eagle_topk != 1:  # a tree re-plans its candidates: a chain's histogram only bounds it
            continue
        for c in t.conc:
            step = measured.get(cfg, {}).get(c)
            source = "step-cost phases" if step is not None else "prior"
            step = step if step is not None else tm.prior_step_ms(cfg, c, measured)
            for label, h in sorted(hists.items(), key=lambda kv: bounds[kv[0]]):
                al = accept_len_at(h, cfg.depth)
                rows.append({"num_steps": cfg.num_steps, "eagle_topk": cfg.eagle_topk,
                             "num_draft_tokens": cfg.num_draft_tokens, "cuda_graph": cfg.cuda_graph,
                             "concurrency": c, "bucket": label, "lo": bounds[label][0],
                             "hi": bounds[label][1],
                             "verify_steps": round(sum(h), 3), "accept_len_pred": al, "step_ms": step,
                             "speedup_pred": tm.predicted_speedup(al, step, base[c])
                             if al and step and base.get(c) else None,
                             "step_source": source if step else "", "sampling": sampling})
    return pd.DataFrame(rows, columns=CONTEXT_COLUMNS)


def write_context_rows(t: TuneRun, measured: dict[Config, dict[int, float]], base: dict[int, float]) -> Path:
    out = t.dir / CONTEXT_FILE
    context_rows(t, measured, base).to_csv(out, index=False)
    return out


def _words(r: pd.Series) -> str:
    graphs = "" if bool(r["cuda_graph"]) else ", graphs off"
    return (f"steps {int(r['num_steps'])}{graphs} ({float(r['speedup_pred']):.2f}x, "
            f"AL {float(r['accept_len_pred']):.2f})")


def _best(rows: pd.DataFrame) -> pd.Series:
    """A bucket's best predicted config; of configs predicted alike (a config whose step cost is the prior
    has its measured neighbour's), the one whose step cost was measured, then the one with CUDA graphs."""
    order = rows.assign(_speed=pd.to_numeric(rows["speedup_pred"]),
                        _measured=rows["step_source"].astype(str) == "step-cost phases",
                        _graphs=rows["cuda_graph"].astype(bool))  # read as bools, as _words reads it
    order = order.sort_values(["_speed", "_measured", "_graphs"], ascending=False, kind="stable")
    return order.iloc[0]


def context_lines(rows: pd.DataFrame, edges: list[int]) -> list[str]:
    """The answer by context bucket, in words: per concurrency, the best predicted config of each bucket with
    enough verify steps where they differ (or that one config holds everywhere), then what is not covered."""
    out: list[str] = []
    reached = (rows[pd.to_numeric(rows["verify_steps"], errors="coerce") >= COVER_STEPS] if not rows.empty
               else rows)
    reached = reached[pd.to_numeric(reached["speedup_pred"], errors="coerce").notna()] if not reached.empty \
        else reached
    for c in sorted({int(x) for x in reached["concurrency"]}) if not reached.empty else []:
        g = reached[reached["concurrency"] == c]
        best = {b: _best(gb) for b, gb in g.groupby("bucket", sort=False)}
        best = dict(sorted(best.items(), key=lambda kv: float(kv[1]["lo"])))
        configs = {(int(r["num_steps"]), bool(r["cuda_graph"])) for r in best.values()}
        if len(configs) > 1:
            out.append(f"c{c} by context: the best config differs with context: "
                       + "; ".join(f"{b}: {_words(r)}" for b, r in best.items()) + f" ({CONTEXT_FILE})")
        elif best:
            r = next(iter(best.values()))
            out.append(f"c{c} by context: steps {int(r['num_steps'])} is the best predicted in every context "
                       f"bucket the suites reached ({', '.join(best)})")
    got = set(reached["bucket"]) if not reached.empty else set()
    missing = [b for b in Buckets(tuple(edges)).labels[:-1] if b not in got]
    if missing and got:
        covered = ", ".join(sorted(got, key=lambda b: float(rows[rows["bucket"] == b]["lo"].iloc[0])))
        out.append(f"warning: the suites' context lengths do not cover the deployment's buckets "
                   f"{', '.join(missing)} (run.context_buckets {edges}): acceptance falls with context, "
                   f"so the answer above holds for {covered or 'none'} only; add prompts that long "
                   "(SPEED-Bench's throughput splits, or import-suite --synthetic --tokens N) and tune again")
    return out


def report_lines(t: TuneRun) -> list[str]:
    """context_lines from the tune directory's tune_by_context.csv (none when it has no rows)."""
    path = Path(t.dir) / CONTEXT_FILE
    if not path.exists() or path.stat().st_size <= 1:
        return []
    try:
        rows = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return []
    lines = context_lines(rows, list(t.plan.run.context_buckets))
    return ["", *lines] if lines else []
