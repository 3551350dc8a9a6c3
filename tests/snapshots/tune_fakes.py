"""A finished tune on fixed numbers for the Tune view's snapshot: five configs at concurrency 1 and 8, the
heatmaps drawn by harness.analysis.tune_report from these rows, the answer in its words."""

from __future__ import annotations

import pandas as pd

from harness.analysis.tune_report import heatmap_text
from harness.studies.tune_view import TuneView

TUNE_DIR = "results/20250301-000000-tune-snap"
# (num_steps, graphs, measured, pred AL, step ms at c1, at c8, speedup at c1, at c8)
CONFIGS = [
    (1, True, "step", 1.71, 9.8, 12.1, 1.52, 1.31),
    (2, True, "verified", 2.28, 10.6, 13.4, 1.96, 1.62),
    (3, True, "verified", 2.71, 11.5, 15.9, 2.41, 1.55),
    (5, True, "", 3.12, None, None, 2.20, 1.21),
    (3, False, "step", 2.71, 16.2, 21.7, 1.52, 0.98),
]
MEASURED = {(2, 8): (1.58, 1.49, 1.66), (3, 1): (2.35, 2.28, 2.42), (2, 1): (1.90, 1.84, 1.97)}
BASE_MS = {1: 7.3, 8: 9.9}


def tune_rows() -> list[dict]:
    rows = []
    for steps, graph, measured, al, ms1, ms8, spd1, spd8 in CONFIGS:
        name = f"s{steps}-k1-d{steps + 1}-{'g' if graph else 'eager'}"
        for c, ms, spd in ((1, ms1, spd1), (8, ms8, spd8)):
            got = MEASURED.get((steps, c)) if measured == "verified" and graph else None
            rows.append(
                {
                    "config": name,
                    "num_steps": steps,
                    "eagle_topk": 1,
                    "num_draft_tokens": steps + 1,
                    "cuda_graph": graph,
                    "concurrency": c,
                    "accept_len_pred": al,
                    "step_ms": ms,
                    "step_ms_prior": None if ms is not None else round(BASE_MS[c] * (1.2 + 0.1 * steps), 2),
                    "speedup_pred": spd,
                    "speedup": got[0] if got else None,
                    "speedup_ci_low": got[1] if got else None,
                    "speedup_ci_high": got[2] if got else None,
                    "measured": ("verified" if got else "step") if measured else "",
                    "status": ("verified" if got else "step-measured") if measured else "predicted",
                    "variant": name,
                }
            )
    return rows


def finished_tune() -> TuneView:
    rows = tune_rows()
    frame = pd.DataFrame(rows)
    return TuneView(
        TUNE_DIR,
        "good-eagle3",
        (1, 8),
        tuple(dict.fromkeys(r["config"] for r in rows)),
        tuple(rows),
        stage="report",
        spent_s=1834.0,
        budget_s=7200.0,
        stop_reason="confirmed",
        starts=7,
        heatmaps={c: heatmap_text(frame, c) for c in (1, 8)},
        answer=(
            "c1: best num_steps 3, eagle_topk 1, num_draft_tokens 4, CUDA graphs on: predicted 2.41x, "
            "measured 2.35x (95% CI 2.28-2.42)",
            "c8: best num_steps 2, eagle_topk 1, num_draft_tokens 3, CUDA graphs on: predicted 1.62x, "
            "measured 1.58x (95% CI 1.49-1.66)",
        ),
        finished=True,
    )
