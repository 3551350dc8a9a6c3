"""The crossover's words: the lines tune_report.txt, the CLI and the TUI say of a
`draftbench tune --concurrency auto` (each config's crossing, the steps that ran without CUDA graphs, the
paired runs against the prediction, the schedule, each engine's export, the mixed load, the request rates
and the text chart), all from harness.analysis.crossover_report's Result and the tune's files.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.analysis import schedule as sc
from harness.analysis.crossover_chart import chart_text
from harness.analysis.crossover_report import Result, engine_versions, exports
from harness.analysis.tune_report import _got, _num, _verdict_of

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneRun


def pays_by_rate(rates: pd.DataFrame, slo: bool) -> list[tuple[float, bool]]:
    """Whether the pick pays at each rate measured, lowest first: under run.slo, its goodput not below the
    baseline's; without one (every request counts), its time per output token better
    (harness.analysis.load_report's rule). One open-loop run per rate: a point estimate, no interval."""
    out = []
    for r in rates.sort_values("request_rate").itertuples() if not rates.empty else []:
        ratio = pd.to_numeric(r.goodput_ratio, errors="coerce")
        tpot = pd.to_numeric(r.tpot_speedup, errors="coerce")
        value = ratio if slo else tpot
        if value == value:
            out.append((float(r.request_rate), bool(value >= 1.0) if slo else bool(value > 1.0)))
    return out


def rate_words(rates: pd.DataFrame, slo: bool) -> str:
    """Where speculation stops paying under request-rate load, or, where the rates measured do not show one
    crossing (it does not pay at a low rate and does at a higher one), which rates it pays at."""
    got = pays_by_rate(rates, slo)
    not_paying = [r for r, pays in got if not pays]
    if not not_paying:
        return "pays at every rate measured"
    first = min(not_paying)
    if all(not pays for r, pays in got if r >= first):
        return f"stops paying at {first:g} req/s (one run per rate, no interval)"
    paying = [r for r, pays in got if pays]
    return (f"does not pay at {', '.join(f'{r:g}' for r in not_paying)} req/s and pays at "
            f"{', '.join(f'{r:g}' for r in paying)} req/s: no single rate where it stops (one run per rate, "
            "no interval)")


def _band_words(b: sc.Band) -> str:
    cfg = sc.band_config(b)
    span = f"c{b.min_batch}-c{b.max_batch}"
    if cfg is None:
        return f"  {span}: speculation off (the baseline)"
    pred = f" (predicted {b.speedup_pred:.2f}x at c{b.min_batch})" if b.speedup_pred is not None else ""
    return (f"  {span}: num_steps {b.num_steps}, eagle_topk {b.eagle_topk}, num_draft_tokens "
            f"{b.num_draft_tokens}, CUDA graphs {'on' if b.cuda_graph else 'off'}{pred}")


def _side_words(res: Result) -> list[str]:
    if res.verified is None:
        return []
    out = []
    for level, row in res.sides.items():
        verdict = _verdict_of(row)
        said = {"faster": "faster: speculation pays", "slower": "slower: speculation does not pay",
                "equivalent": "equivalent: speculation does not pay"}
        words = said.get(verdict, f"cannot tell ({verdict})")
        reason = str(row.get("verdict_reason") or "").strip()
        tail = f": {reason}" if verdict not in said and reason not in ("", "nan") else ""
        out.append(f"  verified at c{level}: {_got(row)}, {words}{tail}")
        out += _against_prediction(res, level, row)
    if not out:
        return ["  not verified: no paired run at the crossover's sides (budget)"]
    verdicts = {level: _verdict_of(row) for level, row in res.sides.items()}
    pays = [lvl for lvl, v in verdicts.items() if v == "faster"]
    top = max(pays, default=0)
    stops = [lvl for lvl, v in verdicts.items() if v in ("slower", "equivalent") and lvl > top]
    if pays and stops:
        out.append(f"  paired runs: speculation pays at c{top} and stops paying by c{min(stops)}: decided on "
                   "both sides")
    elif pays and _pays_to_max(res) and max(pays) >= (res.cross.below if res.cross else 0):
        out.append(f"  paired runs: speculation pays up to c{max(pays)}, the largest batch tried: where it "
                   "stops lies beyond it (a larger --max-batch looks further)")
    elif pays:
        out.append(f"  paired runs: speculation pays up to c{max(pays)}, the largest batch decided; the side "
                   "where it stops is not decided")
    elif stops and res.pick is None:  # no config predicted to pay anywhere: the paired run says so or not
        out.append(f"  paired runs: speculation does not pay even at c{min(stops)}")
    elif stops:
        out.append(f"  paired runs: speculation does not pay at c{min(stops)}; the side where it pays is not "
                   "decided")
    else:
        out.append("  paired runs: neither side decided")
    at = res.cross.at if res.cross is not None else None
    if at is not None and ((pays and max(pays) > at) or (stops and min(stops) < at)):
        out.append(f"  the decode steps put it at c{at:.1f}; end to end (prefill, a batch's tail) it lies "
                   "where the paired runs say")
    return out


def _pays_to_max(res: Result) -> bool:
    return res.cross is not None and res.cross.status == "pays-to-max" and res.cross.below is not None


def _eager_words(res: Result) -> list[str]:
    """Levels whose step costs ran without CUDA graphs although the variant asked for them: above the batch
    the servers capture, every decode step runs eagerly, and the crossover there is an eager one (seen on the
    H200: --cuda-graph-max-bs-decode 16, and the step cost 4x from c16 to c32)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, levels in res.eager.items():
        groups.setdefault(tuple(sorted(levels)), []).append(name)
    out = []
    for levels, names in sorted(groups.items()):
        cap = (f"the servers capture CUDA graphs up to batch {res.graph_cap} (cuda_graph_max_bs_decode)"
               if res.graph_cap else "the servers ran these batches without CUDA graphs")
        raise_to = max(res.max_batch, max(levels))
        at = ", ".join(f"c{b}" for b in levels)
        out.append(f"  without CUDA graphs at {at} ({', '.join(sorted(names))}): "
                   f"{cap}; above that every decode step runs eagerly, so these step costs and the speedups "
                   f"from them are eager ones; server.cuda_graph_max_bs {raise_to} measures captured ones")
    return out


def _against_prediction(res: Result, level: int, row: dict[str, Any]) -> list[str]:
    """A paired run whose interval lies wholly outside the decode steps' prediction at its level: said, since
    the prediction (and the crossover from it) then over- or understates what the server gives end to end."""
    pts = res.curves.get(res.verified, []) if res.verified is not None else []
    p = next((q for q in pts if q.batch == level), None)
    lo, hi = _num(row.get("speedup_ci_low")), _num(row.get("speedup_ci_high"))
    if p is None or p.low is None or p.high is None or lo is None or hi is None:
        return []
    if hi < p.low:
        side = "below"
    elif lo > p.high:
        side = "above"
    else:
        return []
    what = "less" if side == "below" else "more"
    return [f"    predicted {p.speedup:.2f}x (95% {p.low:.2f}-{p.high:.2f}) from the decode steps: the "
            f"paired run lies {side} it; end to end (prefill, a batch's tail) speculation pays {what} "
            "than the decode steps say here"]


def lines(t: TuneRun, res: Result) -> list[str]:
    if not res.curves:
        why = f": {t.state.short['what']} were not measured within the budget" if t.state.short else ""
        return ["", f"crossover: no step costs to tell it from{why}"]
    tried = ", ".join(f"c{b}" for b in res.levels)
    out = ["", f"crossover (where speculation stops paying), from step costs at {tried}:"]
    for cfg, c in sorted(res.crossings.items(), key=lambda kv: kv[0].name):
        out.append(f"  {cfg.name}: {c.words()}")
    out += _eager_words(res)
    if res.pick is not None and res.cross is not None:
        out.append(f"speculation stops paying: {res.pick.name} {res.cross.words()}")
    else:
        out.append("speculation stops paying: no config pays at any batch tried")
    out += _side_words(res)
    out += ["", "schedule (best config per concurrency band, from the predicted speedups):"]
    out += [_band_words(b) for b in res.schedule]
    shares = ", ".join(f"c{c} {w:g}" for c, w in res.mix.items())
    single = res.single.name if res.single is not None else "the baseline (no speculation)"
    how = "stated" if res.mix_stated else "equal time at each level"
    out.append(f"one config for a mix of loads ({how}: {shares}): {single}, the highest predicted tok/s "
               "over the mix")
    data = exports(t, res, engine_versions(t))
    for name, e in data["engines"].items():
        out.append(f"{name}: {e['note']}; {e['dynamic']['note']}")
        if name == "vllm" and e["dynamic"]["available"] and e["dynamic"]["speculative_config"]:
            out.append(f"  --speculative-config '{e['dynamic']['speculative_config']}'")
    out.append(f"TensorRT-LLM draft_len_schedule: {json.dumps(data['tensorrt_llm']['draft_len_schedule'])}")
    if not res.mix_rows.empty:
        out += ["", "mixed load (paired by repeat): the schedule against each single config"]
        for r in res.mix_rows.itertuples():
            ci = (f" (95% CI {r.ratio_ci_low:.2f}-{r.ratio_ci_high:.2f})" if r.ratio_ci_low == r.ratio_ci_low
                  and r.ratio_ci_low is not None else "")
            out.append(f"  vs {r.single}: {r.ratio:.2f}x{ci}, {r.verdict}")
    if not res.rates.empty:
        out += ["", "request rate (goodput under run.slo; the baseline against " +
                (res.pick.name if res.pick else "-") + "):"]
        for r in res.rates.itertuples():
            out.append(f"  {r.request_rate:g} req/s: goodput {r.baseline_goodput_req_s:.2f} vs "
                       f"{r.pick_goodput_req_s:.2f} req/s, TPOT speedup {pd.to_numeric(r.tpot_speedup):.2f}x")
        slo = t.plan.run.slo is not None
        for rule in ([True, False] if slo else [False]):
            by = "goodput under run.slo" if rule else "TPOT" + ("" if slo else " (no run.slo)")
            out.append(f"  by {by}: speculation {rate_words(res.rates, rule)}")
    out += ["", chart_text(res)]
    return out
