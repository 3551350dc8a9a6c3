"""A tune directory as it stands, for the TUI's Tune view (and anything else that wants it mid-tune): the
grid's rows as tune.csv has them, the bookkeeping of tune_state.json, and once the wide run has histograms,
the heatmap and the answer per concurrency. Everything is re-read from the directory, as `--resume` does,
so a tune going on in another process can be shown while it fills.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis import tune_data as td
from harness.analysis import tune_model as tm
from harness.studies.tune import PLAN_FILE, STATE_FILE, _Tune, read_tune_plan

ROW_KEYS = (
    "num_steps",
    "eagle_topk",
    "num_draft_tokens",
    "cuda_graph",
    "concurrency",
    "accept_len_pred",
    "step_ms",
    "step_ms_prior",
    "speedup_pred",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "measured",
    "status",
    "variant",
)


@dataclass(frozen=True)
class TuneView:
    tune_dir: str
    variant: str  # the tuned variant
    concurrency: tuple[int, ...]
    grid: tuple[str, ...]  # config names (tune_model.Config.name), the grid's order
    rows: tuple[dict[str, Any], ...]  # one per (config, concurrency): ROW_KEYS plus "config"
    stage: str = ""
    spent_s: float = 0.0
    budget_s: float = 0.0
    stop_reason: str = ""
    starts: int = 0
    heatmaps: dict[int, str] = field(default_factory=dict)
    answer: tuple[str, ...] = ()
    finished: bool = False  # the report was written (tune.csv)
    crossover: str = ""  # --concurrency auto: where speculation stops paying, the schedule, the text chart


def is_tune_dir(path: str | Path) -> bool:
    return (Path(path) / PLAN_FILE).exists()


def list_tunes(results_dir: str | Path) -> list[Path]:
    """Tune directories under results_dir, newest first (their names start with the time)."""
    root = Path(results_dir)
    return (
        sorted((p for p in root.iterdir() if p.is_dir() and is_tune_dir(p)), reverse=True)
        if root.is_dir()
        else []
    )


def _clean(value: object) -> object:
    if isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value


def _from_files(d: Path) -> tuple[_Tune, bool]:
    """The tune of directory d as its files have it (resume=d: reads its state, writes nothing); True when
    the wide run has the histograms every prediction comes from (then on t.hists and t.hist)."""
    plan, opts = read_tune_plan(d)
    t = _Tune(plan, opts, d.parent, d, None, time.monotonic)
    hists = td.histograms_by_category(d / "wide", t.wide_name) if (d / "wide").is_dir() else {}
    t.hists, t.hist = hists, tm.add_histograms(hists.values())
    return t, bool(hists) and bool(tm.steps_of(t.hist))


def rebuild_report(tune_dir: str | Path) -> Path:
    """tune.csv, the profile, the heatmaps and the answer again from a tune directory's files alone
    (tune_plan.json, tune_state.json and its run directories): nothing is started or measured. For a tune
    that ran elsewhere (a GPU node), or one made before this version of the report."""
    from harness.common.errors import InputError

    d = Path(tune_dir)
    t, ready = _from_files(d)
    if not ready:
        raise InputError(str(d / "wide" / "requests.csv"), None, "spec_histogram",
                         f"no per-request histograms of {t.wide_name}: nothing to predict from")
    return t.report()


def load_tune(tune_dir: str | Path) -> TuneView:
    from harness.analysis import tune_context
    from harness.analysis import tune_report as tr

    d = Path(tune_dir)
    t, ready = _from_files(d)
    state, opts, hists = t.state, t.opts, t.hists
    rows: list[dict[str, Any]] = []
    heatmaps: dict[int, str] = {}
    answer: list[str] = []
    crossover = ""
    if ready:
        frame = tr.tune_rows(t, t.measured(fallback=True), t.base_step(fallback=True))
        rows = [{k: _clean(r[k]) for k in ROW_KEYS} for r in frame.to_dict("records")]
        heatmaps = {c: tr.heatmap_text(frame, c) for c in t.conc}
        answer = tr.answer(frame, hists, t.wide.num_steps, algorithm=t.tuned.spec_algorithm or "EAGLE3",
                           draft_path=str(t.tuned.drafter.path)) + tune_context.report_lines(t)
        if opts.auto:
            from harness.analysis import crossover_report as cr
            from harness.analysis.crossover_text import lines as crossover_lines

            crossover = "\n".join(crossover_lines(t, cr.build(t))).strip("\n")
    else:  # the wide run has not finished: the grid, nothing predicted yet
        for cfg in t.grid:
            status = (
                "rejected"
                if cfg.name in state.rejected
                else "failed"
                if cfg.name in state.failed
                else ""
            )
            for c in t.conc:
                rows.append(
                    {
                        **dict.fromkeys(ROW_KEYS),
                        "num_steps": cfg.num_steps,
                        "eagle_topk": cfg.eagle_topk,
                        "num_draft_tokens": cfg.num_draft_tokens,
                        "cuda_graph": cfg.cuda_graph,
                        "concurrency": c,
                        "measured": "",
                        "status": status or "predicted",
                        "variant": t.wide_name if cfg == t.wide else cfg.name,
                    }
                )
    for r, cfg in zip(rows, [c for c in t.grid for _ in t.conc], strict=True):
        r["config"] = cfg.name
    return TuneView(
        str(d),
        t.tuned.name,
        tuple(t.conc),
        tuple(c.name for c in t.grid),
        tuple(rows),
        stage=str(state.stage),
        spent_s=float(state.spent_s),
        budget_s=float(opts.budget_s),
        stop_reason=str(state.stop_reason),
        starts=int(state.starts),
        heatmaps=heatmaps,
        answer=tuple(answer),
        finished=(d / "tune.csv").exists() and (d / STATE_FILE).exists(),
        crossover=crossover,
    )


def write_winner(plan_path: str | Path, tune_dir: str | Path) -> str | None:
    """`--write-plan`: append the tune's winner to the plan file; its variant name, None when nothing won."""
    import pandas as pd

    from harness.analysis.tune_outputs import write_plan_variant

    plan, opts = read_tune_plan(tune_dir)
    csv = Path(tune_dir) / "tune.csv"
    if not csv.exists():
        return None
    tuned = plan.variant(opts.variant) if opts.variant else next(v for v in plan.variants if v.drafter)
    return write_plan_variant(Path(plan_path), pd.read_csv(csv), tuned)
