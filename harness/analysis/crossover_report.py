"""The crossover of a `draftbench tune --concurrency auto`: each config's predicted speedup against
concurrency with its interval, where it stops paying, the paired verdicts on each side, the schedule per
batch band with each engine's export, the mixed load and the request-rate table. Written as crossover.csv,
schedule.json, the profile's `crossover_concurrency` and `schedule`, tune.csv's `crossover_concurrency` and
`schedule_band` and crossover.png (matplotlib); its lines of tune_report.txt and the text chart (the CLI, the
TUI): harness.analysis.crossover_text. Everything derives from the tune directory's files
(harness.analysis.crossover_data).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.analysis import crossover as cx
from harness.analysis import crossover_data as cd
from harness.analysis import schedule as sc
from harness.analysis import tune_model as tm
from harness.analysis.crossover_chart import chart_png
from harness.analysis.tune_model import Config

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneRun

CROSSOVER_COLUMNS = ["config", "num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph", "batch",
                     "step_ms", "base_step_ms", "speedup_pred", "speedup_pred_low", "speedup_pred_high",
                     "source", "crossover_concurrency", "crossover_low", "crossover_high", "crossover_status",
                     "crossover_pays_from", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict",
                     "cost_requests", "base_cost_requests", "verify_requests"]


@dataclass
class Result:
    levels: list[int]  # every batch with a step cost (the ladder and the bisection's)
    curves: dict[Config, list[cx.Point]]
    crossings: dict[Config, cx.Crossing]
    pick: Config | None  # the config that pays furthest: where speculation as a whole stops paying
    cross: cx.Crossing | None
    sides: dict[int, dict[str, Any]]  # the pick's paired runs at the crossover's sides
    schedule: list[sc.Band]
    max_batch: int
    mix: dict[int, float]
    mix_stated: bool  # the user's --mix (else equal time at every ladder level)
    single: Config | None  # the one config with the highest predicted tok/s over the mix (None: baseline)
    mix_pred: dict[Any, float | None] = field(default_factory=dict)
    mix_rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    rates: pd.DataFrame = field(default_factory=pd.DataFrame)
    # what each level's phases held: (variant, batch) -> requests of its step-cost phase; batch -> the fewest
    # of a paired run's phases there (crossover_data.phase_requests)
    cost_requests: dict[tuple[str, int], int] = field(default_factory=dict)
    verify_requests: dict[int, int] = field(default_factory=dict)
    verified: Config | None = None  # the config the paired runs check: the pick, else closest_to_paying's
    # variant -> the levels whose step cost came from windows without CUDA graphs (variants that asked for
    # them); the CUDA graph batch cap the servers resolved (None: not recorded)
    eager: dict[str, list[int]] = field(default_factory=dict)
    graph_cap: int | None = None

    def crossover_concurrency(self) -> dict[str, float | str | None]:
        """Per config: the batch where it stops paying, "beyond" (pays at every batch tried), 0 (never)."""
        out: dict[str, float | str | None] = {}
        for cfg, c in self.crossings.items():
            out[cfg.name] = (round(c.at, 2) if c.status == "crosses" and c.at is not None else
                             f">{c.below}" if c.status == "pays-to-max" else
                             0 if c.status == "never-pays" else None)
        return out


def _al_se(t: TuneRun, cfg: Config) -> float | None:
    return cx.accept_len_se(t.hist or [], cfg.depth) if cfg.eagle_topk == 1 else None


def mix_of(t: TuneRun, levels: list[int]) -> tuple[dict[int, float], bool]:
    if t.opts.mix:
        return sc.parse_mix(t.opts.mix), True
    return dict.fromkeys(t.conc, 1.0), False


def closest_to_paying(curves: dict[Config, list[cx.Point]], levels: list[int]) -> Config | None:
    """Where no config pays at any batch: the one closest to paying at the smallest batch, the one the paired
    run checks (harness.studies.tune_crossover) and the report reads it for."""
    first = levels[0] if levels else None
    got = [(p.speedup, c) for c, pts in curves.items() for p in pts if p.batch == first]
    return max(got, key=lambda x: (x[0], x[1]))[1] if got else None


def build(t: TuneRun) -> Result:
    """The crossover from the tune directory as it stands."""
    base = cd.step_costs(t.dir, t.plan.baseline.name)
    steps = {cfg: cd.step_costs(t.dir, cfg.name) for cfg in t.grid}
    steps = {k: v for k, v in steps.items() if v}
    levels = sorted(set(base) | {b for v in steps.values() for b in v})
    mix, stated = mix_of(t, levels)
    at = sorted(set(levels) | set(mix))
    curves, crossings = {}, {}
    for cfg, st in steps.items():
        al = t.accept(cfg)
        if not al:
            continue
        curves[cfg] = cx.curve(al, _al_se(t, cfg), st, base, at)
        crossings[cfg] = cx.crossing(al, [p for p in curves[cfg] if p.batch in levels])
    pick, cross = sc.crossover_of(crossings)
    max_batch = int(t.opts.max_batch or t.plan.server.max_running_requests)
    tried = {k: [p for p in v if p.batch in levels] for k, v in curves.items()}
    schedule = sc.bands(tried, levels, max_batch) if levels else []
    pred = sc.mix_throughput(curves, mix) if curves else {}
    verified = pick or closest_to_paying(curves, levels)  # never paying, its paired run is said too
    sides = cd.side_rows(t.dir, verified.name) if verified is not None else {}
    paired = cd.phase_requests(t.dir, "verify")
    verify_requests: dict[int, int] = {}
    for (_, c), n in paired.items():
        verify_requests[c] = min(n, verify_requests.get(c, n))
    graphs = {t.plan.baseline.name: (base, bool(t.plan.baseline.cuda_graph)),
              **{cfg.name: (st, cfg.cuda_graph) for cfg, st in steps.items()}}
    eager = {name: [b for b, s in st.items() if s.eager] for name, (st, on) in graphs.items() if on}
    return Result(levels, curves, crossings, pick, cross, sides, schedule, max_batch, mix, stated,
                  sc.single_best(curves, mix) if curves else None, pred,
                  mix_rows(t, schedule, mix) if stated else pd.DataFrame(), rate_rows(t, pick),
                  cd.phase_requests(t.dir, "cost"), verify_requests, verified,
                  {k: v for k, v in eager.items() if v}, cd.graph_cap(t.dir))


def mix_picks(schedule: list[sc.Band], mix: dict[int, float], baseline: str) -> dict[int, str]:
    """The variant the schedule runs at each level of the mix (the baseline where speculation is off)."""
    out = {}
    for c in mix:
        band = sc.band_of(schedule, c)
        cfg = sc.band_config(band) if band is not None else None
        out[c] = cfg.name if cfg is not None else baseline
    return out


def mix_rows(t: TuneRun, schedule: list[sc.Band], mix: dict[int, float]) -> pd.DataFrame:
    phases = cd.mix_phases(t.dir)
    if phases.empty:
        return pd.DataFrame()
    singles = list(dict.fromkeys(str(v) for v in phases["variant"]))
    return sc.mix_comparison(phases, mix_picks(schedule, mix, t.plan.baseline.name), mix, singles)


def rate_rows(t: TuneRun, pick: Config | None) -> pd.DataFrame:
    """Goodput under run.slo against request rate: the baseline's and the pick's, side by side."""
    rates = cd.rate_table(t.dir)
    if rates.empty or pick is None:
        return pd.DataFrame()
    base = rates[rates["variant"].astype(str) == t.plan.baseline.name].set_index("request_rate")
    mine = rates[rates["variant"].astype(str) == pick.name].set_index("request_rate")
    rows = []
    for r in sorted(set(base.index) & set(mine.index)):
        b, m = base.loc[r], mine.loc[r]
        gb, gm = pd.to_numeric(b["goodput_req_s"]), pd.to_numeric(m["goodput_req_s"])
        rows.append({"request_rate": float(r), "baseline_goodput_req_s": gb, "pick_goodput_req_s": gm,
                     "goodput_ratio": gm / gb if gb and gb == gb else None,
                     "baseline_slo_met": b["slo_met"], "pick_slo_met": m["slo_met"],
                     "tpot_speedup": m["speedup"], "pays": m["pays"]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------- outputs
def frame(res: Result, base: str) -> pd.DataFrame:
    """crossover.csv: per config and batch (`base`: the baseline, whose step-cost phases' requests it has)."""
    rows = []
    for cfg, pts in res.curves.items():
        c = res.crossings.get(cfg, cx.Crossing("unknown"))
        for p in pts:
            v = res.sides.get(p.batch, {}) if cfg == res.verified else {}
            rows.append({"config": cfg.name, "num_steps": cfg.num_steps, "eagle_topk": cfg.eagle_topk,
                         "num_draft_tokens": cfg.num_draft_tokens, "cuda_graph": cfg.cuda_graph,
                         "batch": p.batch,
                         "step_ms": p.step_ms, "base_step_ms": p.base_step_ms, "speedup_pred": p.speedup,
                         "speedup_pred_low": p.low, "speedup_pred_high": p.high, "source": p.source,
                         "crossover_concurrency": c.at, "crossover_low": c.low, "crossover_high": c.high,
                         "crossover_status": c.status, "crossover_pays_from": c.pays_from,
                         "speedup": v.get("speedup"),
                         "speedup_ci_low": v.get("speedup_ci_low"),
                         "speedup_ci_high": v.get("speedup_ci_high"), "verdict": v.get("verdict"),
                         "cost_requests": res.cost_requests.get((cfg.name, p.batch)),
                         "base_cost_requests": res.cost_requests.get((base, p.batch)),
                         "verify_requests": res.verify_requests.get(p.batch) if v else None})
    return pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)


def exports(t: TuneRun, res: Result, engine_versions: dict[str, str | None]) -> dict[str, Any]:
    """schedule.json: the bands, the single config for the mix, and each engine's and TensorRT-LLM's terms."""
    from harness.engines import ENGINE_NAMES, get_engine

    algorithm = t.tuned.spec_algorithm or "EAGLE3"
    draft = str(t.tuned.drafter.path) if t.tuned.drafter is not None else None
    single = res.single
    return {
        "schedule": [sc.band_dict(b) for b in res.schedule],
        "crossover_concurrency": res.crossover_concurrency(),
        # configs that do not pay at the smallest batches tried: the first batch where each pays
        "pays_from": {cfg.name: c.pays_from for cfg, c in res.crossings.items() if c.pays_from is not None},
        "measured_with": engine_versions,
        "mix": {"shares": {str(k): v for k, v in res.mix.items()}, "stated": res.mix_stated,
                "single_config": single.name if single is not None else "baseline",
                "predicted_tok_s": {(k.name if isinstance(k, Config) else k): v
                                    for k, v in res.mix_pred.items()}},
        "engines": {name: get_engine(name).schedule_export(
            res.schedule, algorithm=algorithm, draft_path=draft, version=engine_versions.get(name))
            for name in ENGINE_NAMES},
        "tensorrt_llm": {"draft_len_schedule": trtllm_schedule(res.schedule),
                         "note": "batch sizes above the last key draft 0 tokens (speculation off); a tree "
                                 "band is given as its chain length num_steps"},
    }


def trtllm_schedule(schedule: list[sc.Band]) -> dict[str, int]:
    """TensorRT-LLM's speculative_config.draft_len_schedule: {max batch of a band: draft length}, up to the
    last band that speculates (larger batches draft nothing)."""
    last = max((i for i, b in enumerate(schedule) if b.num_steps), default=-1)
    return {str(b.max_batch): int(b.num_steps) for b in schedule[: last + 1]}


def engine_versions(t: TuneRun) -> dict[str, str | None]:
    for sub in ("wide", "cost"):
        try:
            prov = json.loads((t.dir / sub / "provenance.json").read_text(encoding="utf-8"))
            return {k: (str(v) if v else None) for k, v in (prov.get("engine_versions") or {}).items()}
        except (OSError, ValueError):
            continue
    return {}


def annotate(rows: pd.DataFrame, res: Result) -> pd.DataFrame:
    """tune.csv's `crossover_concurrency` (per config) and `schedule_band` (the band a row's config is
    scheduled in at that concurrency: "c<min>-c<max>", empty where another config or the baseline is)."""
    cross = res.crossover_concurrency()
    out = rows.copy()
    names = [Config(int(r.num_steps), int(r.eagle_topk), int(r.num_draft_tokens), bool(r.cuda_graph)).name
             for r in rows.itertuples()]
    out["crossover_concurrency"] = [cross.get(n) for n in names]
    bands = []
    for n, c in zip(names, rows["concurrency"], strict=True):
        b = sc.band_of(res.schedule, int(c))
        cfg = sc.band_config(b) if b is not None else None
        mine = b is not None and cfg is not None and cfg.name == n
        bands.append(f"c{b.min_batch}-c{b.max_batch}" if mine and b is not None else "")
    out["schedule_band"] = bands
    return out


def write(t: TuneRun, res: Result) -> None:
    frame(res, t.plan.baseline.name).to_csv(t.dir / "crossover.csv", index=False)
    data = exports(t, res, engine_versions(t))
    (t.dir / "schedule.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if not res.rates.empty:
        res.rates.to_csv(t.dir / "tune_load.csv", index=False)
    if not res.mix_rows.empty:
        res.mix_rows.to_csv(t.dir / "tune_mix.csv", index=False)
    prof = t.dir / "speculation_profile.json"
    if prof.exists():
        profile = json.loads(prof.read_text(encoding="utf-8"))
        profile = tm.with_schedule(profile, data["crossover_concurrency"], data["schedule"])
        prof.write_text(json.dumps(profile, indent=1) + "\n", encoding="utf-8")
    chart_png(res, t.dir / "crossover.png")
