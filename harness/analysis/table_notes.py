"""The note column of the results table, in plain words, and the legend that explains each kind of note.

A row's notes come from its summary.csv cells (`row_notes`); each note has a kind, and the CLI table prints
one legend line per kind that appears in it (`legend_lines`), so a reader never meets a note without its
explanation. The TUI's Results rows (harness.analysis.runs) use the same words for the notes they show."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.analysis.acceptance import AGREE_TOLERANCE
from harness.analysis.columns import SummaryRow, is_false, is_true
from harness.analysis.forced import forced_note

# the probe's check and the sources' agreement (summary_rows.AGREE_TOLERANCE: the same 5 %)
AGREE_PCT = f"{100 * AGREE_TOLERANCE:g}"

INERT = "no draft token accepted (accept len 1.00)"
DISAGREE = f"accept-length sources differ by over {AGREE_PCT} %"
SLOWER = "slower than baseline"
TOO_SHORT = "too short to decide"
PROBE_CHECKED = "accept len from a second, untimed pass (checked against the server)"
PROBE_UNCHECKED = "accept len from a second, untimed pass (not checked: no server figure)"

# kind -> its legend line, in the order the legend lists them
LEGEND = {
    "synthetic": "SYNTHETIC: the row pools prompts of a suite marked synthetic (import-suite --synthetic): "
                 "its accept length and speed are not real traffic's; summary_by_category.csv has the "
                 "suite's categories (synthetic-<N>) apart, summary_by_context.csv by context length",
    "failed": "FAILED: the variant's server did not start or did not finish its phases; the reason says "
              "why (its last log lines are in variants.jsonl)",
    "forced": "FORCED: a `draftbench breakeven` copy whose server was told to accept that many tokens per "
              "step: its speed only, never a drafter's result",
    "slower": f"{SLOWER}: the whole speedup interval lies below 1.00x (the ! mark)",
    "too-short": f"{TOO_SHORT}: a phase of this row or of its baseline had too few requests or too little "
                 "steady state for any verdict (summary.csv's verdict_reason says which)",
    "cross-engine": "A faster than B (rows \"X vs Y\"): the same arm, a baseline or one drafter config, on "
                    "two engines, same prompts and concurrency; speedup = tok/s on A / tok/s on B, its "
                    "interval by the speedup's own method; faster or slower only when the interval says so",
    "in-flight": "N in flight on average, not C: the server had fewer requests at once than the concurrency "
                 "asked for (too few prompts, or a long tail), so the row measures that lighter load",
    "probe": "accept len from a second, untimed pass: the timed requests did not report it, so the prompts "
             f"were replayed once more untimed; checked: within {AGREE_PCT} % of the timed pass's server "
             "counter (else its log lines); not checked: neither was there",
    "break-even-batch": "break-even measured at batch N: break-even AL compares step costs at N requests per "
                        "batch, the batch this variant's decode ran at most",
    "output-differs": "output differs from the baseline: at temperature 0 a correct drafter leaves the text "
                      "as the baseline's; char N is where they first differ (median over prompts)",
    "suspect": "SUSPECT (lossless audit): the greedy answers leave the baseline's where the baseline's top "
               "token is not near a tie, more often than the baseline against itself at another batch shape, "
               "or break a suite expectation the baseline's met: what a verify path that accepts wrong draft "
               "tokens does; the worst cases (prompt, token, both tokens, margin) follow, summary.csv's "
               "lossless_detail has all",
    "lossless": "lossless (audit): every divergence from the baseline's greedy answer is at a near-tie (top "
                "two tokens within run.lossless_margin nats, bf16 numerics), no more often than the baseline "
                "against itself at another batch shape (the control); docs/metrics.md, lossless audit",
    "unresolved": "lossless audit unresolved: no control answers, or divergences the baseline's logprobs do "
                  "not reach (summary.csv's lossless_detail says which)",
    "flush-failed": "cache flush failed: the server's cache and counters were not reset before those "
                    "phases; the server's accept-length figure leaves them out",
    "inert": f"{INERT}: the drafter does nothing useful (a wrong algorithm, checkpoint or flags: the "
             "drafter-inert alarm)",
    "disagree": f"{DISAGREE}: the per-request stats, the server's counter and its log lines give accept "
                f"lengths more than {AGREE_PCT} % apart (each in summary.csv's accept_len_* columns)",
}


@dataclass(frozen=True)
class Note:
    kind: str  # a key of LEGEND
    text: str


def _given(value: object) -> bool:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return False
    return not (isinstance(value, str) and value.strip() in ("", "nan"))


def synthetic_note(row: SummaryRow) -> str | None:
    """The synthetic suites a row measured (summary.csv's synthetic_suites), for the CLI and the TUI."""
    names = row.get("synthetic_suites")
    return f"SYNTHETIC suite {', '.join(str(names).split())}" if _given(names) else None


def failed_note(row: SummaryRow) -> Note | None:
    if str(row.get("status")) != "failed":
        return None
    why = row.get("failure_reason")
    return Note("failed", "FAILED" + (f": {why}" if _given(why) else ""))


def verdict_notes(row: SummaryRow) -> list[Note]:
    """Too short to decide (this row's or its baseline's phases), and a load lighter than the concurrency."""
    notes = []
    reason = str(row.get("verdict_reason"))
    if row.get("verdict") == "cross-engine" and ": " in reason:
        word = reason.split(": ", 1)[0]
        if word == "too-short":
            return [Note("too-short", TOO_SHORT)]
        other, _, ref = str(row.get("engine") or "").partition(" vs ")
        said = {"faster": f"{other} faster than {ref}", "slower": f"{other} slower than {ref}",
                "equivalent": f"{other} and {ref} equivalent"}.get(word, f"{other} against {ref} undecided")
        return [Note("cross-engine", said)]
    if is_true(row.get("too_short")) or reason.startswith("too short to decide"):
        notes.append(Note("too-short", TOO_SHORT))
    mif, conc = row.get("mean_in_flight"), row.get("concurrency")
    if _given(mif) and conc and float(mif) < 0.75 * float(conc):
        notes.append(Note("in-flight", f"{float(mif):.1f} in flight on average, not {float(conc):.0f}"))
    return notes


def spec_notes(row: SummaryRow) -> list[Note]:
    """Where the accept length came from, the batch the break-even holds for, output divergence and failed
    cache flushes."""
    notes = []
    source = str(row.get("accept_len_source") or "")
    if source == "probe":
        notes.append(Note("probe", PROBE_CHECKED))
    elif source == "probe-unchecked":
        notes.append(Note("probe", PROBE_UNCHECKED))
    batch, conc = row.get("break_even_batch"), row.get("concurrency")
    if _given(batch) and conc and float(conc) > 1:
        notes.append(Note("break-even-batch", f"break-even measured at batch {float(batch):.0f}"))
    match, first = row.get("output_match"), row.get("first_divergence")
    if _given(match) and float(match) < 1.0:
        where = f", first at char {float(first):.0f} (median)" if _given(first) else ""
        notes.append(Note("output-differs", f"output differs from the baseline{where}"))
    flush = row.get("flush_failed")
    if _given(flush) and float(flush) > 0:
        notes.append(Note("flush-failed", f"cache flush failed before {float(flush):.0f} phase(s)"))
    return notes


NOTE_CHARS = 160  # the suspect note's worst cases, cut here (lossless_detail has them whole)


def lossless_notes(row: SummaryRow) -> list[Note]:
    """The lossless audit's verdict (harness.analysis.lossless): suspect with its worst cases, lossless where
    the answers differ, unresolved."""
    verdict, detail = row.get("lossless_verdict"), row.get("lossless_detail")
    detail = str(detail) if _given(detail) else ""
    if verdict == "suspect":
        cut = detail if len(detail) <= NOTE_CHARS else detail[: NOTE_CHARS - 3] + "..."
        return [Note("suspect", f"SUSPECT: {cut}")]
    rate = row.get("divergence_rate")
    if verdict == "lossless" and _given(rate) and float(rate) > 0:
        margin, control = row.get("max_divergence_margin"), row.get("control_divergence_rate")
        tail = f"; control {float(control):.2f}" if _given(control) else ""
        top = f"max {float(margin):.2f} nats" if _given(margin) else "no margin"
        return [Note("lossless", f"lossless: divergences at near-ties only ({top}{tail})")]
    if verdict == "unresolved":
        return [Note("unresolved", "lossless audit unresolved")]
    return []


def accept_notes(row: SummaryRow) -> list[Note]:
    """A drafter that accepts nothing, and accept-length sources that disagree."""
    notes = []
    al = row.get("accept_len")
    if _given(al) and float(al) <= 1.005:
        notes.append(Note("inert", INERT))
    if is_false(row.get("accept_sources_agree")):
        notes.append(Note("disagree", DISAGREE))
    return notes


def row_notes(row: SummaryRow) -> list[Note]:
    """Every note of a row, in the table's order: forced first (its numbers are speed only), synthetic
    suites (not real traffic), then failure, the verdict's, where the figures come from, the drafter's own."""
    forced = forced_note(row)
    notes = [Note("forced", forced)] if forced else []
    synthetic = synthetic_note(row)
    if synthetic:
        notes.append(Note("synthetic", synthetic))
    failed = failed_note(row)
    if failed:
        notes.append(failed)
    if is_true(row.get("slower_than_baseline")):
        notes.append(Note("slower", SLOWER))
    return notes + verdict_notes(row) + spec_notes(row) + lossless_notes(row) + accept_notes(row)


def legend_lines(kinds: set[str] | list[str]) -> list[str]:
    """One line per kind of note that appears, in LEGEND's order; none when no row has a note."""
    present = set(kinds)
    lines = [LEGEND[k] for k in LEGEND if k in present]
    return ["notes:", *(f"  {line}" for line in lines)] if lines else []
