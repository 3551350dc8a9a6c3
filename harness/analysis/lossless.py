"""The lossless audit: is a greedy speculative arm's divergence from its baseline bf16 numerics, or a broken
verify path? (docs/metrics.md, "Lossless audit".)

From the run directory: the greedy answers (outputs.csv with requests.csv), and audit.jsonl, which the run
wrote in an untimed pass on the baseline's server after its timed phases (harness.bench.audit):
  audit  one line per audited baseline: its control concurrency, the margin threshold, what went wrong;
  path   the baseline's answer to a prompt with logprobs (harness.analysis.logprob_paths): the control
         pass's free answer at another batch shape, and continuations anchored on the baseline's own texts;
  expect a prompt's expectation (harness.inputs.expectations).
Per (variant, concurrency) against its engine's baseline, first turns only:
  divergence_rate          share of the prompts both answered whose answers differ;
  control_divergence_rate  share of the baseline's own answers at this concurrency that its control pass
                           (the same prompts at another concurrency, in reverse order) answered differently:
                           what numerics alone do on this machine and model;
  max_divergence_margin    the largest margin, logprob(baseline's token) - logprob(variant's token) at the
                           first divergent position, in the baseline's own context (a lower bound where
                           the variant's token is not among the top alternatives);
  lossless_verdict         lossless: every divergence at a near-tie (|margin| under the threshold), the
                           rate not above the control's (one-sided Fisher exact test at ALPHA), and every
                           expectation the baseline's answer met still met; suspect: any of these fails
                           (lossless_detail names the worst cases); unresolved: no control, or divergences
                           the logprobs do not reach.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.logprob_paths import Margin, ScoredPath, Tok, margin_at
from harness.analysis.outputs import first_divergence
from harness.inputs.expectations import Expect

AUDIT_FILE = "audit.jsonl"
DEFAULT_MARGIN = 0.5  # nats: 4 bf16 ulps of a logit between 16 and 32 (docs/metrics.md says why)
ALPHA = 0.01  # the rate test's level: a false alarm in 1 of 100 good rows
WORST = 3  # worst cases named in the detail and the alarm

Key = tuple[str, str, str]  # (baseline variant, suite, prompt id)


@dataclass
class Audit:
    passes: dict[str, dict[str, Any]] = field(default_factory=dict)  # baseline -> its audit line
    paths: dict[Key, list[ScoredPath]] = field(default_factory=dict)
    free: dict[Key, str] = field(default_factory=dict)  # the control pass's answer
    expects: dict[tuple[str, str], Expect] = field(default_factory=dict)

    def add(self, d: dict[str, Any]) -> None:
        kind = d.get("kind")
        if kind == "audit":
            self.passes[str(d["variant"])] = d
        elif kind == "expect":
            self.expects[(str(d["suite"]), str(d["prompt_id"]))] = Expect.model_validate(d["expect"])
        elif kind == "path":
            key = (str(d["variant"]), str(d["suite"]), str(d["prompt_id"]))
            toks = [Tok(str(t), float(lp), tuple((str(a), float(b)) for a, b in alts))
                    for t, lp, alts in d["tokens"]]
            self.paths.setdefault(key, []).append(ScoredPath(str(d["text"]), int(d.get("prefix", 0)), toks,
                                                             int(d.get("start_token", 0))))
            if d.get("source") == "free":
                self.free.setdefault(key, str(d["text"]))


def read_audit(run_dir: str | Path) -> Audit | None:
    """audit.jsonl as the summary reads it (a line cut by a kill is skipped); None when the run has none."""
    path = Path(run_dir) / AUDIT_FILE
    if not path.exists():
        return None
    audit = Audit()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            audit.add(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
    return audit


def answers(requests: pd.DataFrame, outputs: pd.DataFrame | None, variant: str, conc: int) -> pd.DataFrame:
    """(phase, request_id, suite, prompt_id, answer) of a variant's first-turn greedy answers at `conc`."""
    cols = ["phase", "request_id", "suite", "prompt_id", "answer"]
    if outputs is None or outputs.empty or requests.empty:
        return pd.DataFrame(columns=cols)
    r = requests[(requests["variant"] == variant) & (requests["concurrency"] == conc)
                 & requests["ok"].eq(True)]
    if "turn" in r:
        r = r[pd.to_numeric(r["turn"], errors="coerce").fillna(1) == 1]
    o = outputs[outputs["variant"] == variant].drop_duplicates(["phase", "request_id"], keep="last")
    o = o.assign(answer=o["reasoning"].map(_str) + o["text"].map(_str))
    got = r[["phase", "request_id", "suite", "prompt_id"]].merge(o[["phase", "request_id", "answer"]],
                                                                  on=["phase", "request_id"])
    return got.astype({"suite": str, "prompt_id": str})[cols]


def _str(x: object) -> str:
    return x if isinstance(x, str) else ""  # an empty cell reads back as NaN


def fisher_greater(x1: int, n1: int, x2: int, n2: int) -> float:
    """One-sided Fisher exact test: P(at least x1 of the n1 are divergent | x1 + x2 divergent in all)."""
    k = x1 + x2
    total = math.comb(n1 + n2, n1)
    return sum(math.comb(k, i) * math.comb(n1 + n2 - k, n1 - i) for i in range(x1, min(k, n1) + 1)) / total


@dataclass
class Case:
    """One divergent answer."""

    suite: str
    prompt_id: str
    margin: Margin | None  # None: the logprobs do not reach it
    char: int | None = None  # where the answers first differ

    def words(self) -> str:
        where = f"{self.suite}/{self.prompt_id}"
        if self.margin is None:
            return f"{where}: not reached by the baseline's logprobs"
        m = self.margin
        sign = ">= " if m.bound else ""
        return f"{where} token {m.token}: {m.base_token!r} vs {m.spec_token!r} {sign}{m.margin:.2f} nats"


def control(base: pd.DataFrame, audit: Audit, baseline: str) -> tuple[int, int] | None:
    """(answers the control pass answered differently, answers compared), or None without a control."""
    free = [audit.free.get((baseline, s, p)) for s, p in zip(base["suite"], base["prompt_id"], strict=True)]
    pairs = [(a, f) for a, f in zip(base["answer"], free, strict=True) if f is not None]
    return (sum(a != f for a, f in pairs), len(pairs)) if pairs else None


def compare(base: pd.DataFrame, spec: pd.DataFrame, audit: Audit,
            baseline: str) -> tuple[list[Case], list[str], int]:
    """(the divergent answers with their margins, the expectations speculation broke, answers compared) of
    two `answers` frames, paired by (phase, request id)."""
    pairs = base.merge(spec[["phase", "request_id", "answer"]], on=["phase", "request_id"],
                       suffixes=("_base", "_spec"))
    cases: list[Case] = []
    broken: list[str] = []
    for row in pairs.itertuples(index=False):
        b, s = str(row.answer_base), str(row.answer_spec)
        key = (baseline, str(row.suite), str(row.prompt_id))
        if b != s:
            d = first_divergence(b, s)
            m = None if d is None or d >= min(len(b), len(s)) \
                else margin_at(audit.paths.get(key, []), b, s, d)
            cases.append(Case(key[1], key[2], m, d))
        expect = audit.expects.get(key[1:])
        if expect is not None and expect.violation(b) is None and (why := expect.violation(s)) is not None:
            broken.append(f"{key[1]}/{key[2]}: {why[:60]}")
    return cases, broken, len(pairs)


def row_audit(requests: pd.DataFrame, outputs: pd.DataFrame | None, audit: Audit | None, baseline: str,
              variant: str, conc: int) -> dict[str, Any]:
    """The audit's columns of one summary row (a baseline row: its control rate alone)."""
    if audit is None or baseline not in audit.passes:
        return {}
    head = audit.passes[baseline]
    threshold = float(head.get("margin", DEFAULT_MARGIN))
    base = answers(requests, outputs, baseline, conc)
    ctl = control(base, audit, baseline)
    out: dict[str, Any] = {"control_divergence_rate": ctl[0] / ctl[1] if ctl else None}
    if variant == baseline:
        return out
    cases, broken, n = compare(base, answers(requests, outputs, variant, conc), audit, baseline)
    if n == 0:
        return out
    out.update(_verdict(cases, broken, n, ctl, threshold, head))
    return out


def _verdict(cases: list[Case], broken: list[str], n: int, ctl: tuple[int, int] | None, threshold: float,
             head: dict[str, Any]) -> dict[str, Any]:
    # a lower bound under the threshold says nothing: such a case is as unreached as one without a margin
    measured = [c for c in cases
                if c.margin is not None and not (c.margin.bound and c.margin.margin < threshold)]
    far = sorted((c for c in measured if abs(c.margin.margin) >= threshold),  # type: ignore[union-attr]
                 key=lambda c: -abs(c.margin.margin))  # type: ignore[union-attr]
    rate = len(cases) / n
    reasons: list[str] = []
    if far:
        reasons.append(f"{len(far)} of {len(cases)} divergences at {threshold:g} nats or more: "
                       + "; ".join(c.words() for c in far[:WORST]))
    p = fisher_greater(len(cases), n, ctl[0], ctl[1]) if ctl else None
    if p is not None and p < ALPHA:
        reasons.append(f"divergence rate {rate:.2f} above the control's {ctl[0] / ctl[1]:.2f} "  # type: ignore[index]
                       f"(one-sided Fisher p={p:.3g})")
    if broken:
        reasons.append(f"{len(broken)} answers break the expectation the baseline's met: "
                       + "; ".join(broken[:WORST]))
    out: dict[str, Any] = {
        "divergence_rate": rate,
        "max_divergence_margin": max((abs(c.margin.margin) for c in measured), default=None),  # type: ignore[union-attr]
    }
    unreached = [c for c in cases if c not in measured]
    if reasons:
        out.update(lossless_verdict="suspect", lossless_detail=" | ".join(reasons))
    elif ctl is None or unreached:
        why = [f"no control answers ({head.get('error') or 'the control pass got none'})"] \
            if ctl is None else []
        if head.get("error") and ctl is not None:
            why.append(str(head["error"]))
        if unreached:
            why.append(f"{len(unreached)} of {len(cases)} divergences not reached by the baseline's "
                       "logprobs: " + "; ".join(c.words() for c in unreached[:WORST]))
        out.update(lossless_verdict="unresolved", lossless_detail=" | ".join(why))
    else:
        tail = f"rate {rate:.2f} vs control {ctl[0] / ctl[1]:.2f}" \
            + (f" (p={p:.2g})" if p is not None else "")
        lead = f"{len(cases)} divergences, all near-ties (max {out['max_divergence_margin']:.2f} nats)" \
            if cases else "no divergence"
        out.update(lossless_verdict="lossless", lossless_detail=f"{lead}; {tail}")
    return out
