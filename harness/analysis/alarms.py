"""Live alarms during a run, from the server's log windows and from the summary table.

`AlarmTracker.feed(variant, window)` watches each `Decode batch` window as it arrives:
  drafter-inert    accept len exactly 1.00 for several windows in a row (no draft token accepted) from a
                   drafter that has accepted nothing so far: one that accepted drafts before is not inert (on
                   the H200 a phase's last request, generating past its answer under ignore_eos, read 1.00 for
                   ten windows in a row from a head that accepts 4.6 tokens per step everywhere else);
  cuda-graph-off   `cuda graph: False` windows while the variant runs with CUDA graphs enabled.
`AlarmTracker.compare(summary)` looks at the finished comparison:
  slower-than-baseline   a speculative variant whose verdict is `slower` (95 % CI below 1.00x), with the
                         break-even accept length and the measured cost per verify step next to the accept
                         length it got;
  lossless-suspect       a greedy variant whose lossless_verdict is `suspect` (harness.analysis.lossless):
                         raised live as the variant finishes (harness.bench.audit, through `raise_once`),
                         else here.
Each alarm fires once per variant (per concurrency for the comparison); `counts` keeps the tallies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.analysis.forced import is_forced
from harness.common.events import Alarm
from harness.inputs.config import Plan, Variant

if TYPE_CHECKING:
    import pandas as pd

    from harness.common.logwindow import LogWindow

    # what a tracker learns its variants from: a Plan, one Variant, runner meta ({"variant", "algorithm",
    # "cuda_graph", ...}), a {name: meta or Variant} mapping, or an iterable of those
    Source = Plan | Variant | Mapping[str, Any] | Iterable["Source"]

INERT_WINDOWS = 3  # accept len 1.00 this many windows in a row -> the drafter is inert
ACCEPTING = 1.3  # a window at or above this shows the drafter accepting (random weights read <= 1.10)


@dataclass(frozen=True)
class VariantInfo:
    speculative: bool | None  # None: unknown (then a window carrying accept len decides)
    algorithm: str = ""
    cuda_graph: bool | None = None  # None: unknown, no cuda-graph alarm
    graph_max_bs: int | None = None
    engine: str = "sglang"  # whose flags and rules the alarm's causes name


def _bool(value: object) -> bool | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


def _num(value: object) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _infos(source: Source) -> dict[str, VariantInfo]:
    """From a Plan, one Variant, runner meta dicts ({"variant", "algorithm", "cuda_graph", ...}), a
    {name: meta} mapping, or an iterable of those."""
    if isinstance(source, Plan):
        max_bs = source.server.cuda_graph_max_bs
        return {v.name: _from_variant(v, max_bs) for v in source.variants}
    if isinstance(source, Variant):
        return {source.name: _from_variant(source, None)}
    if isinstance(source, Mapping):
        if "variant" in source:
            return {str(source["variant"]): _from_meta(source)}
        return {
            str(k): _from_meta({"variant": k, **v}) if isinstance(v, Mapping) else _from_variant(v, None)
            for k, v in source.items()
        }
    out: dict[str, VariantInfo] = {}
    for item in source or ():
        out.update(_infos(item))
    return out


def _from_variant(v: Variant, max_bs: int | None) -> VariantInfo:
    alg = v.spec_algorithm or ""
    return VariantInfo(bool(alg), alg.upper(), bool(v.cuda_graph), max_bs, v.engine or "sglang")


def _from_meta(meta: Mapping[str, Any]) -> VariantInfo:
    alg = str(meta.get("algorithm") or "")
    spec = bool(alg) if "algorithm" in meta else None
    bs = (
        meta.get("server_cuda_graph_max_bs_decode")
        or meta.get("server_cuda_graph_max_bs")
        or meta.get("cuda_graph_max_bs")
    )
    return VariantInfo(spec, alg.upper(), _bool(meta.get("cuda_graph")), int(bs) if _num(bs) else None,
                       str(meta.get("engine") or "sglang"))


def inert_causes(algorithm: str, engine: str = "sglang") -> str:
    """The likely causes of an inert drafter, in the variant's engine's own flags (Engine.inert_causes)."""
    from harness.engines import ENGINE_NAMES, get_engine

    return "; ".join(get_engine(engine if engine in ENGINE_NAMES else "sglang").inert_causes(algorithm))


class AlarmTracker:
    """Stateful: feed it every log window of a run in order; it returns the alarms to raise now."""

    def __init__(self, source: Source = (), *, inert_windows: int = INERT_WINDOWS):
        self.infos = _infos(source)
        self.inert_windows = inert_windows
        self.inert_run: dict[str, int] = {}
        self.accepted: set[str] = set()  # variants that have shown a window with drafts accepted
        self.counts: dict[tuple[str, str], int] = {}
        self.fired: set[tuple[str, str]] = set()

    def set_graph_max_bs(self, variant: str, max_bs: int | None) -> None:
        """The captured decode batch size the server reported (/server_info), once it is known."""
        info = self.infos.get(variant, VariantInfo(None))
        self.infos[variant] = replace(info, graph_max_bs=max_bs)

    def _once(self, variant: str, code: str, severity: str, message: str) -> list[Alarm]:
        self.counts[(variant, code)] = self.counts.get((variant, code), 0) + 1
        if (variant, code) in self.fired:
            return []
        self.fired.add((variant, code))
        return [Alarm(variant, severity, code, message)]

    def raise_once(self, alarm: Alarm) -> list[Alarm]:
        """An alarm found elsewhere (the lossless audit), once per variant and code."""
        return self._once(alarm.variant, alarm.code, alarm.severity, alarm.message)

    def feed(self, variant: str, window: LogWindow) -> list[Alarm]:
        if window.kind != "decode":
            return []
        info = self.infos.get(variant, VariantInfo(None))
        out: list[Alarm] = []
        accept = window.accept_len
        if accept is not None and info.speculative is not False:
            inert = round(float(accept), 2) == 1.0
            if float(accept) >= ACCEPTING:
                self.accepted.add(variant)
            run = self.inert_run.get(variant, 0) + 1 if inert else 0
            self.inert_run[variant] = run
            if run >= self.inert_windows and variant not in self.accepted:
                out += self._once(
                    variant,
                    "drafter-inert",
                    "error",
                    f"accept len 1.00 for {run} windows in a row: the drafter is inert (no draft "
                    f"token accepted, every step pays for drafting). Likely causes: "
                    f"{inert_causes(info.algorithm, info.engine)}. "
                    "`draftbench check PLAN` tests most of these.",
                )
        if window.cuda_graph is False and info.cuda_graph:
            batch = window.running_req
            if info.graph_max_bs is not None and batch is not None and batch > info.graph_max_bs:
                out += self._once(
                    variant,
                    "cuda-graph-off",
                    "info",
                    f"cuda graph: False at batch {batch}, above cuda_graph_max_bs "
                    f"{info.graph_max_bs}: those steps run eagerly (raise server.cuda_graph_max_bs)",
                )
            else:
                out += self._once(
                    variant,
                    "cuda-graph-off",
                    "warning",
                    f"cuda graph: False in a decode window (batch {batch}) although CUDA graphs are "
                    "enabled: decode runs eagerly and slower. Look in the server log for a failed "
                    "capture, or a batch above the captured sizes",
                )
        return out

    def compare(self, summary: pd.DataFrame | None) -> list[Alarm]:
        """slower-than-baseline alarms from a summary DataFrame (harness.analysis.summary columns)."""
        if summary is None or len(summary) == 0:
            return []
        rows = summary.to_dict("records")
        base = {int(_num(r.get("concurrency")) or 0): r for r in rows if _bool(r.get("baseline"))}
        out: list[Alarm] = []
        for r in rows:
            if r.get("lossless_verdict") == "suspect":
                out += self._once(str(r["variant"]), "lossless-suspect", "error",
                                  f"c{int(_num(r.get('concurrency')) or 0)}: {r.get('lossless_detail')}")
            if _bool(r.get("baseline")) or not r.get("algorithm") or not isinstance(r.get("algorithm"), str):
                continue
            if is_forced(r):  # slower at a forced accept length is what breakeven measures, not a finding
                continue
            conc = int(_num(r.get("concurrency")) or 0)
            b = base.get(conc)
            tok, btok = _num(r.get("tok_s")), _num(b.get("tok_s")) if b else None
            if tok is None or not btok:
                continue
            # the verdict decides (a 0.95x inside the noise is no alarm); summaries from before it: tok/s
            if ("verdict" in r and r.get("verdict") != "slower") or ("verdict" not in r and tok >= btok):
                continue
            key = (str(r["variant"]), f"slower-than-baseline@c{conc}")  # once per variant and concurrency
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.fired:
                self.fired.add(key)
                out.append(
                    Alarm(key[0], "warning", "slower-than-baseline", _slower_message(r, b, tok, btok, conc))
                )
        return out


def _slower_message(r: dict[str, Any], b: dict[str, Any], tok: float, btok: float, conc: int) -> str:
    accept = _num(r.get("accept_len"))
    be = _num(r.get("break_even_accept_len"))
    if be is None and accept is not None:
        be = accept * btok / tok
    parts = [f"{tok:.1f} tok/s vs the baseline's {btok:.1f} at concurrency {conc} ({tok / btok:.2f}x)."]
    if isinstance(r.get("verdict_reason"), str) and r["verdict_reason"]:
        parts.append(r["verdict_reason"] + ".")
    if accept is not None and be is not None:
        parts.append(f"Accept len {accept:.2f}, break-even {be:.2f}:")
    step, bstep = _num(r.get("step_ms")), _num(b.get("step_ms"))
    if step is not None and bstep:
        parts.append(
            f"each verify step costs {step:.2f} ms against {bstep:.2f} ms per baseline decode step "
            f"({step / bstep:.2f}x), so a step must commit that many tokens to pay off."
        )
    elif be is not None:
        parts.append("a step must commit that many tokens to pay off.")
    if _bool(r.get("cuda_graph")) is False:
        parts.append("CUDA graphs were off for this variant: turn them on first.")
    if accept is not None and round(accept, 2) <= 1.0:
        parts.append("Accept len 1.00: the drafter is inert.")
    elif accept is not None:  # a drafter that works, at a config that does not pay: the seed's second failure
        parts.append(f"`draftbench tune PLAN --variant {r['variant']}` tries other num_steps, eagle_topk, "
                     "num_draft_tokens and CUDA graphs for this drafter, or shows that none pays.")
    return " ".join(parts)
