"""speculation_profile.json: a drafter's acceptance as one run measured it, overall and per category, each
accept length with its 95 % interval over prompts, plus the per-position rates from the histograms
(NVIDIA specdec_bench writes a file of that name with conditional and marginal rates; ours adds the
intervals `draftbench watch` compares against). Written into the evaluation run of a promotion."""

from __future__ import annotations

import time
from pathlib import Path

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

    @property
    def step_accept_len(self) -> float | None:
        """1 + Σ marginals: the mean tokens per verify step from the histograms (specdec_bench's check)."""
        return 1.0 + sum(self.marginal) if self.marginal else None


class SpeculationProfile(BaseModel):
    run: str
    variant: str
    drafter_path: str | None = None
    written_at: str
    overall: AcceptStats
    categories: dict[str, AcceptStats]


def measure_profile(run_dir: str | Path, variant: str) -> SpeculationProfile:
    from harness.analysis.summary import read_variants

    rq = variant_requests(run_dir, variant)
    ref = overall(rq)
    if ref is None:
        raise InputError(str(run_dir), None, "variant", f"{variant}: no requests with speculative stats in this run")
    meta = read_variants(Path(run_dir)).get(variant, {})
    return SpeculationProfile(run=str(run_dir), variant=variant, drafter_path=meta.get("drafter_path"),
                              written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), overall=AcceptStats.of(ref),
                              categories={s.category: AcceptStats.of(s) for s in spots(rq, "category")})


def write_profile(run_dir: str | Path, variant: str, path: str | Path | None = None) -> Path:
    out = Path(path) if path is not None else Path(run_dir) / PROFILE_FILE
    out.write_text(measure_profile(run_dir, variant).model_dump_json(indent=1) + "\n", encoding="utf-8")
    return out


def read_profile(path: str | Path) -> SpeculationProfile:
    p = Path(path)
    try:
        return SpeculationProfile.model_validate_json(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(str(p), None, None, f"unreadable speculation profile: {exc}") from None
