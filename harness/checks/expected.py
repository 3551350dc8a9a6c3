"""Findings a plan declares on purpose: a variant's `expect:` (the demo's wrong-flag arm) turns the matching
preflight errors and warnings into notes, so the arm still runs and the report says why."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from harness.common.findings import Finding, info

if TYPE_CHECKING:
    from harness.inputs.config import Plan

# a live alarm a variant may expect -> the preflight findings that lead to it
ALARM_CAUSES: dict[str, frozenset[str]] = {
    "drafter-inert": frozenset({"eagle3-drafter-with-eagle", "drafter-arch-not-eagle3"}),
    "cuda-graph-off": frozenset({"cuda-graph-disabled"}),
}


EXPECTED = "expected ("  # how a demoted finding's `what` begins


def is_expected(f: Finding) -> bool:
    """A finding the plan declared with `expect:` (demoted to a note by apply_expectations)."""
    return f.severity == "info" and f.what.startswith(EXPECTED)


def expected_codes(words: list[str]) -> set[str]:
    """The finding codes a variant's `expect:` covers: each word itself, and the causes of an alarm word."""
    out: set[str] = set()
    for w in words:
        out.add(w)
        out |= ALARM_CAUSES.get(w, frozenset())
    return out


def apply_expectations(plan: Plan, findings: list[Finding]) -> list[Finding]:
    """Demote each finding a variant expects to an info note that names the expectation; a word that matched
    nothing gets a note of its own (the arm is not wrong in the way the plan says)."""
    wanted = {v.name: list(v.expect) for v in plan.variants if v.expect}
    if not wanted:
        return findings
    out: list[Finding] = []
    matched: dict[str, set[str]] = {name: set() for name in wanted}
    for f in findings:
        words = wanted.get(f.variant)
        hit = [w for w in words or [] if f.code in expected_codes([w])]
        if f.severity == "info" or not hit:
            out.append(f)
            continue
        matched[f.variant].update(hit)
        out.append(replace(f, severity="info",
                           what=f"{EXPECTED}{f.severity}, the plan says `expect: {hit[0]}`): {f.what}"))
    for name, words in wanted.items():
        for w in words:
            if w not in matched[name] and w not in ALARM_CAUSES:
                out.append(info(name, "expectation-unmet", f"`expect: {w}` matched no preflight finding",
                                "the live alarms may still show it", "drop it from the variant if it no "
                                "longer applies"))
    return out
