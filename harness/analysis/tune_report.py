"""`draftbench tune` results: tune.csv (every grid point at every concurrency), the acceptance curve per
category, speculation_profile.json, a heatmap of predicted speedup (text; PNG when matplotlib is
installed) and the answer in words. Everything derives from the tune's run directories.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.analysis import tune_context
from harness.analysis import tune_data as td
from harness.analysis import tune_model as tm
from harness.analysis.tune_heatmap import heatmap_png, heatmap_text
from harness.analysis.tune_model import Config
from harness.inputs.sampling import sampling_label

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneRun

# a row of tune.csv (or of a paired run's summary): a pandas row, or the same as a dict
Row = pd.Series | Mapping[str, Any]

TUNE_COLUMNS = ["num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph", "concurrency", "accept_len_pred",
                "accept_len_measured", "step_ms", "tok_s_pred", "tok_s_measured", "speedup", "speedup_ci_low",
                "speedup_ci_high", "measured", "speedup_pred", "step_ms_prior", "base_step_ms",
                "break_even_accept_len", "accept_len_error_pct", "tok_s_error_pct", "speedup_error_pct",
                "verdict", "status", "variant", "accept_len_pred_cost_prompts", "verdict_reason",
                "step_phase_speedup", "step_phase_decode_speedup", "decode_speedup_error_pct",
                "speedup_pred_low", "speedup_pred_high", "step_source", "ci_level", "sampling",
                "crossover_concurrency", "schedule_band"]
COLLAPSE_BELOW = 0.5  # a position whose conditional acceptance falls below this is where the chain collapses


def _err(pred: float | None, got: float | None) -> float | None:
    if pred is None or got is None or pd.isna(pred) or pd.isna(got) or not got:
        return None
    return round(100.0 * (float(pred) - float(got)) / float(got), 2)


def _num(value: object) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def tune_rows(t: TuneRun, measured: dict[Config, dict[int, float]], base: dict[int, float]) -> pd.DataFrame:
    """One row per (grid config, concurrency). `measured`: "verified" (full paired run), "step" (its own
    step-cost phases), "" (step cost from the prior between measured neighbours; an estimate)."""
    verified = td.verified_rows(t.dir / "wide")
    if t.opts.auto:  # the crossover's paired runs are verifications too: the answer says what they decided
        from harness.analysis.crossover_data import verify_dirs

        for d in verify_dirs(t.dir):
            verified.update({k: v for k, v in td.verified_rows(d).items() if k not in verified})
    cost_al = {c.name: td.measured_accept_len(t.dir / "cost", c.name) for c in measured}
    # the step-cost phases: same prompts, same tokens, each config
    cost_rows = td.verified_rows(t.dir / "cost")
    base_name = t.plan.baseline.name
    # the step-cost phases replay the suites' first prompts (a level's its own first ones): their own
    # prediction is the like-for-like one
    cost_hist = {c: tm.add_histograms(td.histograms_by_category(t.dir / "wide", t.wide_name,
                                                                t.cost_sources(c)).values()) for c in t.conc}
    rows = []
    for cfg in t.grid:
        name = t.wide_name if cfg == t.wide else cfg.name
        al = t.accept(cfg)
        for c in t.conc:
            step = measured.get(cfg, {}).get(c)
            prior = None if step is not None else tm.prior_step_ms(cfg, c, measured)
            use = step if step is not None else prior
            v = verified.get((name, c)) or (verified.get((cfg.name, c)) if cfg == t.wide else None)
            status = ("rejected" if cfg.name in t.state.rejected else
                      "failed" if cfg.name in t.state.failed else "")
            tok_pred = tm.decode_tok_s(al, c, use) if al and use else None
            spd_pred = tm.predicted_speedup(al, use, base[c]) if al and use and base.get(c) else None
            al_meas = _num(v.get("accept_len")) if v else cost_al.get(cfg.name, {}).get(c)
            al_cost = (tm.predicted_accept_len(cost_hist[c], cfg)
                       if cfg.eagle_topk == 1 and tm.steps_of(cost_hist[c]) else None)
            tok_meas = _num(v.get("tok_s")) if v else None
            spd = _num(v.get("speedup")) if v else None
            # measured in the step-cost phases, like for like with speedup_pred (decode only, same batch)
            cr, br = cost_rows.get((cfg.name, c)), cost_rows.get((base_name, c))
            phase_spd = _num(cr.get("speedup")) if cr else None
            dec = _num(cr.get("decode_tok_s")) if cr else None
            bdec = _num(br.get("decode_tok_s")) if br else None
            dec_spd = dec / bdec if dec and bdec else None
            lo_hi = _prior_range(cfg, c, measured, base, al) if prior is not None else (None, None)
            rows.append({
                "speedup_pred_low": lo_hi[0], "speedup_pred_high": lo_hi[1],
                "step_source": (t.step_source.get(cfg, "step-cost phases")
                                if step is not None else "prior" if prior is not None else ""),
                "ci_level": _num(v.get("ci_level")) if v else None,
                "num_steps": cfg.num_steps, "eagle_topk": cfg.eagle_topk,
                "num_draft_tokens": cfg.num_draft_tokens,
                "cuda_graph": cfg.cuda_graph, "concurrency": c, "accept_len_pred": al,
                "accept_len_measured": al_meas, "step_ms": step, "tok_s_pred": tok_pred,
                "tok_s_measured": tok_meas,
                "speedup": spd, "speedup_ci_low": _num(v.get("speedup_ci_low")) if v else None,
                "speedup_ci_high": _num(v.get("speedup_ci_high")) if v else None,
                "measured": "verified" if v else ("step" if step is not None else ""),
                "speedup_pred": spd_pred, "step_ms_prior": prior, "base_step_ms": base.get(c),
                "break_even_accept_len": (tm.break_even_accept_len(use, base[c]) if use and base.get(c)
                                          else None),
                # like for like: a verified row measured the whole suites, a step row the step-cost prompts
                "accept_len_error_pct": _err(al if v else al_cost, al_meas),
                "tok_s_error_pct": _err(tok_pred, tok_meas),
                "speedup_error_pct": _err(spd_pred, spd), "verdict": v.get("verdict") if v else None,
                "status": status or ("verified" if v else
                                     "step-measured" if step is not None else "predicted"),
                "variant": name, "accept_len_pred_cost_prompts": al_cost,
                "verdict_reason": v.get("verdict_reason") if v else None, "step_phase_speedup": phase_spd,
                "step_phase_decode_speedup": dec_spd, "decode_speedup_error_pct": _err(spd_pred, dec_spd),
            })
    out = pd.DataFrame(rows, columns=TUNE_COLUMNS)
    # the tune's sampler
    out["sampling"] = sampling_label(t.tuned.sampling, t.plan.run.temperature)
    return out


def _prior_range(cfg: Config, c: int, measured: dict[Config, dict[int, float]], base: dict[int, float],
                 al: float | None) -> tuple[float | None, float | None]:
    """The predicted speedup's range for a config whose step cost is the prior's guess: a verify step costs
    at least a plain decode step and, for a chain of the same graph setting, no more than the nearest
    measured longer chain (or, with none longer, the guess itself doubled)."""
    if not al or not base.get(c):
        return None, None
    longer = [v[c] for m, v in measured.items() if c in v and m.eagle_topk == cfg.eagle_topk
              and m.cuda_graph == cfg.cuda_graph and m.num_steps > cfg.num_steps]
    shorter = [v[c] for m, v in measured.items() if c in v and m.eagle_topk == cfg.eagle_topk
               and m.cuda_graph == cfg.cuda_graph and m.num_steps < cfg.num_steps]
    guess = tm.prior_step_ms(cfg, c, measured)
    hi_step = min(longer) if longer else (2.0 * guess if guess else None)
    lo_step = max(shorter) if shorter else base[c]
    if not hi_step:
        return None, None
    return tm.predicted_speedup(al, hi_step, base[c]), tm.predicted_speedup(al, lo_step, base[c])


def best_per_concurrency(rows: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """The config with the highest predicted speedup among those whose step cost was measured."""
    out: dict[int, dict[str, Any]] = {}
    m = rows[rows["measured"] != ""]
    for c, g in m.groupby("concurrency"):
        g = g[pd.to_numeric(g["speedup_pred"], errors="coerce").notna()]
        if not g.empty:
            out[int(c)] = g.loc[pd.to_numeric(g["speedup_pred"]).idxmax()].to_dict()
    return out


def acceptance_curves(hists: dict[str, list[int]], positions: int) -> pd.DataFrame:
    """P(accepted >= k) and P(k | k-1) per category (and "all") at every draft position."""
    rows = []
    for cat, h in [("all", tm.add_histograms(hists.values())), *sorted(hists.items())]:
        for k, (m, cnd) in enumerate(zip(tm.marginal_rates(h, positions), tm.conditional_rates(h, positions),
                                         strict=True), start=1):
            rows.append({"category": cat, "position": k, "p_accepted_at_least": round(m, 4),
                         "conditional": round(cnd, 4), "verify_steps": tm.steps_of(h)})
    return pd.DataFrame(rows)


def _cfg_words(b: Row) -> str:
    return (f"num_steps {b['num_steps']}, eagle_topk {b['eagle_topk']}, num_draft_tokens "
            f"{b['num_draft_tokens']}, CUDA graphs {'on' if b['cuda_graph'] else 'off'}")


def launch_flags(b: Row, algorithm: str = "EAGLE3", draft_path: str | None = None) -> str:
    """The SGLang launch flags of a tune row's config, to paste after `python -m sglang.launch_server`."""
    argv = ["--speculative-algorithm", algorithm or "EAGLE3"]
    if draft_path:
        argv += ["--speculative-draft-model-path", str(draft_path)]
    argv += ["--speculative-num-steps", str(b["num_steps"]), "--speculative-eagle-topk", str(b["eagle_topk"]),
             "--speculative-num-draft-tokens", str(b["num_draft_tokens"])]
    if not b["cuda_graph"]:  # a bool: tune_rows' rows take it from their Config
        argv.append("--disable-cuda-graph")
    return shlex.join(argv)


def _got(b: Row) -> str:
    spd, lo, hi = _num(b.get("speedup")), _num(b.get("speedup_ci_low")), _num(b.get("speedup_ci_high"))
    if spd is None:
        return ""
    level = _num(b.get("ci_level"))
    label = f"{100 * level:.4g}%" if level is not None else "95%"
    ci = f" ({label} CI {lo:.2f}-{hi:.2f})" if lo is not None and hi is not None else ""
    return f"measured {spd:.2f}x" + ci


def _verdict_of(b: Row) -> str:
    """A verified row's verdict; a summary from before the verdict columns: its interval decides."""
    verdict = str(b.get("verdict") or "")
    if verdict in ("faster", "slower", "equivalent", "undecided", "too-short"):
        return verdict
    if verdict == "within-noise":  # an older summary's words
        return "too-short" if str(b.get("verdict_reason") or "").startswith("too short") else "undecided"
    lo, hi = _num(b.get("speedup_ci_low")), _num(b.get("speedup_ci_high"))
    if lo is None or hi is None:
        return "undecided"
    return "faster" if lo > 1.0 else "slower" if hi < 1.0 else "undecided"


def _pred_words(b: Row) -> str:
    pred = _num(b.get("speedup_pred"))
    if pred is None:
        return ""
    lo, hi = _num(b.get("speedup_pred_low")), _num(b.get("speedup_pred_high"))
    rng = f", range {lo:.2f}-{hi:.2f}x from the step-cost prior" if lo is not None and hi is not None \
        and str(b.get("measured") or "") in ("", "nan") else ""
    return f"predicted {pred:.2f}x{rng}"


def _loss_why(b: Row, hists: dict[str, list[int]], positions: int) -> str:
    all_h = tm.add_histograms(hists.values())
    k = tm.collapse_position(all_h, COLLAPSE_BELOW, positions)
    weak = sorted((tm.conditional_rates(h, positions)[k - 1] if k else 0.0, cat) for cat, h in hists.items())
    where = (f"; acceptance drops below {COLLAPSE_BELOW:.0%} at position {k}"
             f" (weakest: {', '.join(cat for _, cat in weak[:3])})" if k else "")
    need, reach = _num(b.get("break_even_accept_len")), _num(b.get("accept_len_pred"))
    pred = _num(b.get("speedup_pred"))
    if need is not None and reach is not None and reach < need:
        return f"needs accept length {need:.2f} at its step cost and this drafter reaches {reach:.2f}" + where
    return ((f"reaches accept length {reach:.2f}" if reach is not None else "its accept length")
            + (f" where its step cost needs {need:.2f}" if need else "")
            + (f" (predicted {pred:.2f}x)" if pred is not None else "")
            + ", so the loss is outside the decode steps (prefill, TTFT cost, scheduling)" + where)


def answer(rows: pd.DataFrame, hists: dict[str, list[int]], positions: int, *, algorithm: str = "EAGLE3",
           draft_path: str | None = None) -> list[str]:
    """The answer per concurrency, in words, from what the tune has: the config to use with its verdict and
    interval (a verified row's words follow its verdict, never the point estimate alone), or
    "speculation does not pay here" (equivalent or slower), or "cannot tell yet" with what would decide it;
    the best predicted config when it is not the one measured; the launch flags to paste; and what is left
    to decide. A tune stopped by its budget still answers from the wide run's histograms and step costs."""
    out: list[str] = []
    predicted_only = False  # a level answered by a prediction alone
    if rows.empty:
        return out
    for c in sorted({int(x) for x in rows["concurrency"]}):
        g = rows[rows["concurrency"] == c]
        pred_rows = g[pd.to_numeric(g["speedup_pred"], errors="coerce").notna()]
        best_pred = (pred_rows.loc[pd.to_numeric(pred_rows["speedup_pred"]).idxmax()]
                     if not pred_rows.empty else None)
        ver = g[(g["measured"] == "verified") & pd.to_numeric(g["speedup"], errors="coerce").notna()]
        best = None
        if not ver.empty:
            fast = ver[[_verdict_of(r) == "faster" for _, r in ver.iterrows()]]
            pool = fast if not fast.empty else ver
            best = pool.loc[pd.to_numeric(pool["speedup"]).idxmax()]
        use = None
        if best is not None:
            verdict, got, cfg = _verdict_of(best), _got(best), _cfg_words(best)
            pred = _pred_words(best)
            pred = f"; {pred}" if pred else ""
            if verdict == "faster":
                use = best
                out.append(f"c{c}: use {cfg}: {got}, faster than the baseline{pred}")
            elif verdict == "equivalent":
                out.append(f"c{c}: speculation does not pay here (equivalent): the best measured ({cfg}) "
                           f"{got} lies within the equivalence band of 1.00x{pred}")
            elif verdict == "slower":
                out.append(f"c{c}: speculation does not pay here (slower): no config beats the baseline: "
                           f"the best ({cfg}) {_loss_why(best, hists, positions)} ({got}, slower)")
            else:
                reason = str(best.get("verdict_reason") or "").strip()
                reason = "" if reason == "nan" else reason
                out.append(f"c{c}: cannot tell yet ({verdict}): the best measured ({cfg}) {got}"
                           + (f": {reason}" if reason else ": no interval") + pred)
        elif best_pred is not None:
            pred = float(best_pred["speedup_pred"])
            cfg = _cfg_words(best_pred)
            if pred > 1.0:
                use, predicted_only = best_pred, True
                out.append(f"c{c}: best predicted {cfg}: {_pred_words(best_pred)}, not verified: "
                           "a prediction from the step costs, not a measurement")
            else:
                out.append(f"c{c}: no config beats the baseline: the best ({cfg}) "
                           f"{_loss_why(best_pred, hists, positions)} (predicted, not verified)")
        else:
            out.append(f"c{c}: nothing to predict from: no step cost of the baseline at this concurrency")
            continue
        shown = use if use is not None else best
        if best_pred is not None and shown is not None and _cfg_words(best_pred) != _cfg_words(shown):
            ahead = _num(best_pred.get("speedup_pred")) or 0.0
            here = _num(shown.get("speedup_pred")) or _num(shown.get("speedup")) or 0.0
            if ahead > here * 1.02:
                out.append(f"  best predicted: {_cfg_words(best_pred)}: {_pred_words(best_pred)} "
                           f"({str(best_pred.get('status') or 'predicted')}), not verified")
        if use is not None:
            out.append(f"  launch flags: {launch_flags(use, algorithm, draft_path)}")
        left = g[g["status"].astype(str) == "predicted"]
        if not left.empty:
            names = ", ".join(f"steps {r['num_steps']}" if int(r["eagle_topk"]) == 1 else
                              f"{r['num_steps']}/{r['eagle_topk']}/{r['num_draft_tokens']}"
                              for _, r in left.iterrows())
            out.append(f"  left to decide: {len(left)} configs predicted only ({names}): "
                       "draftbench tune --resume DIR --budget 5m measures them")
    if predicted_only:
        out += _prediction_record(rows)
    return out


def _prediction_record(rows: pd.DataFrame) -> list[str]:
    """Where the answer leaves levels predicted only: how the predictions fared where a paired run measured
    the same config end to end (on the H200, 1.74x predicted against 1.35x measured at c1, 1.64x against
    1.25x at c64: decode steps alone, no prefill, no wave tails)."""
    pairs = [(int(r["concurrency"]), float(r["speedup_pred"]), float(r["speedup"]))
             for _, r in rows.iterrows() if r["measured"] == "verified"
             and _num(r.get("speedup")) is not None and _num(r.get("speedup_pred")) is not None]
    if not pairs:
        return []
    said = "; ".join(f"c{c} {pred:.2f}x predicted, {got:.2f}x measured" for c, pred, got in sorted(pairs))
    tail = (": every measurement is below its prediction: read a level predicted only as an upper estimate"
            if all(got < pred for _, pred, got in pairs) else "")
    return [f"predictions against paired runs of the same config: {said}{tail}"]


def write_outputs(t: TuneRun, rows: pd.DataFrame) -> Path:
    out = t.dir / "tune.csv"
    rows.to_csv(out, index=False)
    positions = t.wide.num_steps
    acceptance_curves(t.hists, positions).to_csv(t.dir / "acceptance.csv", index=False)
    profile = tm.speculation_profile(
        t.hist, positions, method=(t.tuned.spec_algorithm or "eagle3"), per_category=t.hists,
        per_request_mean=td.per_request_accept_len(t.dir / "wide", t.wide_name),
        draft_checkpoint={"name": t.tuned.drafter.name,
                          "id": "/".join(str(t.tuned.drafter.path).split("/")[-2:])},
        target_model={"id": "/".join(str(t.plan.model.path).split("/")[-2:])},
        conditions={"engine": "sglang", "num_steps": positions, "eagle_topk": 1, "concurrency": t.conc,
                    "suites": [s.name for s in t.plan.suites], "simulated": bool(t.plan.target.simulated)})
    (t.dir / "speculation_profile.json").write_text(json.dumps(profile, indent=1) + "\n", encoding="utf-8")
    (t.dir / "tune_report.txt").write_text(render(t, rows) + "\n", encoding="utf-8")
    for c in t.conc:
        heatmap_png(rows, c, t.dir / f"heatmap_c{c}.png")
    return out


def shortfall_words(short: dict[str, Any], tune_dir: object) -> str:
    """The shortfall in words, with the command that buys it."""
    reserve = float(short.get("reserve_s") or 0.0)
    kept = f", ~{reserve:.0f} s of it kept for a verification" if reserve else ""
    return (f"budget: {short['what']} not measured: they need ~{float(short['need_s']):.0f} s{kept}; "
            f"{float(short['left_s']):.0f} s of the budget was left; draftbench tune --resume {tune_dir} "
            f"--budget {short['resume_min']}m measures them")


def render(t: TuneRun, rows: pd.DataFrame) -> str:
    positions = t.wide.num_steps
    curves = acceptance_curves(t.hists, positions)
    lines = [f"tune of {t.tuned.name} ({t.tuned.drafter.name}): {int(t.state.starts)} server starts "
             "for a grid "
             f"of {len(t.grid)}; stop: {t.state.stop_reason or 'unfinished'}; "
             f"{float(t.state.spent_s):.0f} s of {t.opts.budget_s:.0f} s", ""]
    if t.state.short:  # what the budget could not buy, first: the lines below are short of it
        lines += [shortfall_words(t.state.short, t.dir), ""]
    lines += answer(rows, t.hists, positions, algorithm=t.tuned.spec_algorithm or "EAGLE3",
                    draft_path=str(t.tuned.drafter.path)) + tune_context.report_lines(t)
    lines += ["", "P(accepted >= k) per category (wide run, topk 1):"]
    cats = list(dict.fromkeys(curves["category"]))
    lines.append(f"{'category':<14}" + "".join(f"{k:>7}" for k in range(1, positions + 1)))
    for cat in cats:
        vals = curves[curves["category"] == cat]["p_accepted_at_least"]
        lines.append(f"{cat:<14}" + "".join(f"{v:>7.2f}" for v in vals))
    for c in t.conc:
        lines += ["", heatmap_text(rows, c)]
    return "\n".join(lines)
