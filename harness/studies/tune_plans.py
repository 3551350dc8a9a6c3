"""The plans `draftbench tune` derives from the user's: one variant per grid config, the wide and verify
runs over the plan's own suites, the step-cost runs decode-only over its first prompts. Pure functions of
the plan; the search (harness.studies.tune) decides which to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.tune_model import Config

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant

COST_LOG_INTERVAL = 4  # decode iterations per log window in step-cost phases
LOAD_PER_SLOT = 4  # request-rate phases of tune --concurrency auto: requests per slot of the largest batch
LOAD_SUITE = "load"  # their suite: the plan's prompts cycled (harness.studies.tune_budget.load_plan reads it)
# step-cost phases: requests per slot of their own batch (run.requests_per_slot), four waves at every level:
# the first wave's prefill ramp and each refill are a small share of the windows at full batch (one wave of
# 64 at c64 was mostly ramp), and a small batch's phase is not the largest batch's count one after another
COST_PER_SLOT = 4


def variant_dict(tuned: Variant, cfg: Config, name: str | None = None) -> dict[str, Any]:
    """The tuned variant at config cfg, as plan YAML would give it."""
    base = tuned.model_dump(mode="json")
    base.update(name=name or cfg.name, num_steps=cfg.num_steps, eagle_topk=cfg.eagle_topk,
                num_draft_tokens=cfg.num_draft_tokens, cuda_graph=cfg.cuda_graph, baseline=None)
    return base


def derived(plan: Plan, variants: list[dict[str, Any]], conc: list[int], cost_tokens: int, *, cost: bool,
            baseline_last: bool = False, source: str | Path, budget_s: float | None = None,
            rates: list[float] | None = None, fixed_repeats: int | None = None,
            max_running: int | None = None) -> Plan:
    """The plan's baseline and `variants` at closed-loop levels `conc`; `cost`: the step-cost phases;
    `rates`: request-rate phases instead (open loop, the crossover's load stage); `fixed_repeats`: that many
    repeats of every phase, no stopping rule (the mixed load's paired run)."""
    from harness.inputs.config import Plan

    data = plan.resolved_dict()
    base = plan.baseline.model_dump(mode="json")
    data["variants"] = [*variants, base] if baseline_last else [base, *variants]
    # closed-loop levels only; no lossless audit (an untimed pass per sub-run the tune's budget does not plan)
    run = dict(data["run"], concurrency=[] if rates else conc, request_rate=list(rates or []),
               lossless_audit=False, concurrency_auto=False)  # a sub-run's levels are the search's own
    # short windows: enough clean ones at every batch size from a short phase (steps.py); the wide run
    # too, so that its servers' launch commands are the step-cost ones and those phases can adopt them
    data["server"] = dict(data["server"], decode_log_interval=min(COST_LOG_INTERVAL,
                                                                  data["server"]["decode_log_interval"]))
    if max_running and max_running > int(data["server"]["max_running_requests"]):  # --max-batch above the cap
        data["server"]["max_running_requests"] = max_running
    prompts = [p for s in data["suites"] for p in s["prompts"]]  # cost_sources() names the same

    def cycled(n: int, tag: str) -> list[dict[str, Any]]:
        keep = ("category", "messages", "text")
        return [{**{k: v for k, v in prompts[i % len(prompts)].items() if k in keep}, "id": f"{tag}-{i}"}
                for i in range(n)]

    if rates:  # open loop: enough requests per rate for the batch to build up to the largest level and stay
        data["suites"] = [{"name": LOAD_SUITE,
                           "description": "the plan's prompts cycled for request-rate phases",
                           "prompts": cycled(LOAD_PER_SLOT * max(conc), "load")}]
    if cost:  # decode-only: every request of a level starts together and runs to the same length; a
        # level's phase is COST_PER_SLOT x its batch of these (run.requests_per_slot), the largest's all
        data["suites"] = [{"name": "step-cost", "description": "decode-only step-cost phases",
                           "prompts": cycled(COST_PER_SLOT * max(conc), "cost")}]
        run.update(max_tokens=cost_tokens, ignore_eos=True, per_request_spec="off", repeats=1,
                   warmup_requests=1, phase_sizing=False, requests_per_slot=COST_PER_SLOT, stop="fixed")
    elif rates:  # open loop, one run per rate; goodput and TPOT need no per-request acceptance, whose probe
        # (SGLang 0.5.13-0.5.18: every prompt again, non-streaming, one at a time) cost more than the rates
        run.update(stop="fixed", repeats=1, until_ci_pct=None, per_request_spec="off")
    elif fixed_repeats is not None:
        run.update(stop="fixed", repeats=max(1, fixed_repeats), until_ci_pct=None)
    elif not run.get("until_ci_pct"):  # the wide and verify runs stop when their rows are decided
        run.update(stop="decided",
                   max_repeats=max(int(run.get("max_repeats") or 1), int(run.get("repeats") or 1)))
    if not cost and not rates:  # the closed-loop runs that judge (wide, verify, mix): phase sizing gives
        # every level's phase >= 4 x its concurrency requests and run.min_steady_s (up to run.max_phase_s)
        run.update(phase_sizing=True, requests_per_slot=None)
    if budget_s is not None:
        run["budget_s"] = max(1.0, float(budget_s))
    data["run"] = run
    data["name"] = f"{plan.name}-{'cost' if cost else 'load' if rates else 'wide'}"
    out = Plan.model_validate(data)
    out._source_path = source  # provenance names a file
    return out


def cost_sources(plan: Plan, conc: list[int], level: int | None = None, cost_dir: Path | None = None
                 ) -> set[str]:
    """The wide run's request ids (`<suite>/<prompt id>`) of the prompts the step-cost phases replay: at
    `level`, that level's phase's (COST_PER_SLOT x level of them), else every level's. `cost_dir`: the
    step-cost run as it ran (its plan.resolved.json): one made before run.requests_per_slot replayed its whole
    suite, max(concurrency) prompts, at every level."""
    ids = [f"{s['name']}/{p['id']}" for s in plan.resolved_dict()["suites"] for p in s["prompts"]]
    if not ids:
        return set()
    n, per_slot = COST_PER_SLOT * max(conc), COST_PER_SLOT
    try:
        ran = json.loads((Path(cost_dir) / "plan.resolved.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):  # not run yet (or no directory): this version's rule
        ran = None
    if isinstance(ran, dict):
        n = sum(len(s.get("prompts") or []) for s in ran.get("suites") or []) or n
        per_slot = (ran.get("run") or {}).get("requests_per_slot")
    if level is not None and per_slot:
        n = min(n, int(per_slot) * level)
    return {ids[i % len(ids)] for i in range(n)}
