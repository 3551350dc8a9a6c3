"""speculation_profile.json of a promotion: the promoted drafter's acceptance in its evaluation run.

The file is NVIDIA specdec_bench's schema as `draftbench tune` writes it (harness.analysis.tune_model:
conditional and marginal per-position rates, per category, the check that 1 + Σ marginals is the per-step
mean), plus a `draftbench` section that specdec_bench lacks and `draftbench watch` compares against: the
run and variant, and the accept length overall and per category with its 95 % interval over prompts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness.common.errors import InputError
from harness.retrain.weak_spots import Spot, overall, spots, variant_requests

PROFILE_FILE = "speculation_profile.json"


class AcceptStats(BaseModel):
    requests: int
    prompts: int
    accept_len: float | None
    accept_low: float | None = None  # 95 % bootstrap interval over prompts
    accept_high: float | None = None
    marginal: list[float] = Field(default_factory=list)  # P(>=k), k = 1..
    conditional: list[float] = Field(default_factory=list)  # P(k | k-1)

    @classmethod
    def of(cls, s: Spot) -> AcceptStats:
        return cls(requests=s.requests, prompts=s.prompts, accept_len=s.accept_len, accept_low=s.accept_low,
                   accept_high=s.accept_high, marginal=list(s.marginal), conditional=list(s.conditional))


class SpeculationProfile(BaseModel):
    """The file's `draftbench` section."""

    run: str
    variant: str
    drafter_path: str | None = None
    written_at: str
    overall: AcceptStats
    categories: dict[str, AcceptStats]


def measure_profile(run_dir: str | Path, variant: str) -> dict[str, Any]:
    """The whole file: specdec_bench's fields from the variant's summed histograms, and the draftbench
    section."""
    from harness.analysis import tune_model as tm
    from harness.analysis.summary import read_variants

    rq = variant_requests(run_dir, variant)
    ref = overall(rq)
    if ref is None:
        raise InputError(str(run_dir), None, "variant",
                         f"{variant}: no requests with speculative stats in this run")
    meta = read_variants(Path(run_dir)).get(variant, {})

    def summed(rows: Iterable[object]) -> list[int]:
        return tm.add_histograms(tm.parse_histogram(x) for x in rows) if "spec_histogram" in rq else []

    h = summed(rq.get("spec_histogram", []))
    steps = int(meta.get("num_steps") or max(1, len(h) - 1))
    out = tm.speculation_profile(
        h, steps, method=str(meta.get("algorithm") or "eagle3"),
        per_category={str(c): summed(g["spec_histogram"]) for c, g in rq.groupby("category")},
        per_request_mean=ref.accept_len,
        draft_checkpoint={"name": meta.get("drafter"), "path": meta.get("drafter_path")},
        conditions={"engine": meta.get("engine") or "sglang", "num_steps": steps, "run": str(run_dir),
                    "variant": variant, "simulated": bool(meta.get("simulated"))})
    out["draftbench"] = SpeculationProfile(
        run=str(run_dir), variant=variant, drafter_path=meta.get("drafter_path"),
        written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), overall=AcceptStats.of(ref),
        categories={s.category: AcceptStats.of(s) for s in spots(rq, "category")}).model_dump(mode="json")
    return out


def write_profile(run_dir: str | Path, variant: str, path: str | Path | None = None) -> Path:
    out = Path(path) if path is not None else Path(run_dir) / PROFILE_FILE
    out.write_text(json.dumps(measure_profile(run_dir, variant), indent=1) + "\n", encoding="utf-8")
    return out


def read_profile(path: str | Path) -> SpeculationProfile:
    """The `draftbench` section of a profile this module wrote (tune's profiles have none: no intervals)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "draftbench" not in data:
            raise ValueError("no 'draftbench' section: not a promotion's profile (intervals are needed)")
        return SpeculationProfile.model_validate(data["draftbench"])
    except (OSError, ValueError) as exc:
        raise InputError(str(p), None, None, f"unreadable speculation profile: {exc}") from None
