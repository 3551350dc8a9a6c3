"""The headless front end: print run events as progress on stderr and the final table on stdout."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from harness.analysis.failures import cause_from_log, describe_failure, meaningful_tail
from harness.bench.arrivals import load_label
from harness.common import events as ev
from harness.common.errors import EXIT_FAILURES, EXIT_OK, say
from harness.common.terminal import clean

PROGRESS_EVERY_S = 2.0


async def consume(events: AsyncIterator[Any], *, out=None, wide: bool = False) -> int:
    """Drain a run's events; returns the exit code. The table comes from summary.csv, like everywhere
    (`wide`: every column, not only those that decide)."""
    from harness.analysis.load_report import render_load_tables
    from harness.analysis.report import render_table
    from harness.analysis.summary import load_summary

    out = out or sys.stdout
    last = 0.0
    result = EXIT_FAILURES
    failed_logs: dict[str, list[str]] = {}  # variant -> its failed server's last log lines
    async for e in events:
        if isinstance(e, ev.RunStarted):
            sim = " (SIMULATED: draftbench's stand-in)" if e.simulated else ""
            say(f"run {e.run_id}{sim}: {len(e.variants)} variants, "
                f"{e.total_requests} requests -> {e.run_dir}")
        elif isinstance(e, ev.NodeState):
            detail = f" ({e.detail})" if e.detail else ""
            say(f"[node {e.node}] {e.state}: {', '.join(e.variants) or '-'}{detail}")
        elif isinstance(e, ev.ServerState):
            extra = f" port {e.port} pgid {e.pgid}" if e.port and e.state in ("ready", "starting") else ""
            if e.state in ("ready", "kept") and e.pgid is None:  # an `endpoint:` server: not ours
                extra = (f" port {e.port}" if e.state == "ready" and e.port else "") + \
                    (" (an endpoint draftbench did not start)" if e.state == "ready" else
                     ": left running, draftbench did not start it")
            if e.state == "adopted":  # another run kept it; this one takes it over (harness.serve.adopt)
                extra = f" port {e.port} pgid {e.pgid}: {e.detail}"
            if e.state in ("starting", "stopped") and e.detail:  # stopped: its shutdown lines were expected
                extra = f": {e.detail}"
            if e.state == "failed" and e.detail:
                failed_logs[e.variant] = e.detail.splitlines()
                cause = cause_from_log(failed_logs[e.variant])
                say(f"[{e.variant}] server failed: {cause}" if cause else f"[{e.variant}] server failed")
                # no cause we know: the log's last lines (no progress bars) say what there is
                if cause is None:
                    for line in meaningful_tail(failed_logs[e.variant]):
                        say("  " + line)
            else:
                say(f"[{e.variant}] server {e.state}{extra}")
        elif isinstance(e, ev.PhaseStarted):
            say(f"[{e.variant}] {e.phase}: {e.requests} requests {load_label(e.phase, e.concurrency)}")
        elif isinstance(e, ev.RequestDone):
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S or e.done == e.total:
                last = now
                r = e.record
                say(f"  {e.done}/{e.total} requests done (last: {r.variant} {r.prompt_id} "
                     f"{'ok' if r.ok else 'ERROR ' + r.error})")
        elif isinstance(e, ev.PhaseDone):
            acc = f", server accept len {e.server_accept_len:.2f}" if e.server_accept_len else ""
            passes = f" ({e.passes} passes over the suite)" if e.passes > 1 else ""
            say(f"[{e.variant}] {e.phase} done in {e.wall_s:.1f} s{passes}{acc}")
        elif isinstance(e, ev.PhaseSized):
            say(f"[{e.variant}] {sized_words(e)}")
        elif isinstance(e, ev.Look):
            say(look_words(e))
        elif isinstance(e, ev.VariantDone) and not e.ok:
            why = describe_failure(f"server {e.detail}", failed_logs.get(e.variant, []))
            say(f"[{e.variant}] FAILED: {why}; its last log lines are in variants.jsonl")
        elif isinstance(e, ev.Alarm):
            say(f"[{e.variant or 'plan'}] {e.severity.upper()} {e.code}: {e.message}")
        elif isinstance(e, ev.RunDone):
            if e.summary_csv:
                print(clean(render_table(load_summary(e.run_dir), wide=wide)), file=out, flush=True)
                extra = render_load_tables(e.run_dir)
                if extra:
                    print(clean(extra), file=out, flush=True)
            say(f"run directory: {e.run_dir}"
                + ("" if e.complete else "  (incomplete: some variants failed)"))
            print(e.run_dir, file=out, flush=True)
            errors = int(e.extra.get("request_errors", 0))
            if errors:
                say(f"{errors} requests failed (recorded with their error in requests.csv)")
            result = EXIT_OK if e.complete and not errors else EXIT_FAILURES
    return result


def sized_words(e: ev.PhaseSized) -> str:
    """`c8: 64 prompts give ~2.7 s of steady state; replaying the suite 4x for ~11 s`
    (harness.bench.sizing)."""
    cap = " (run.max_phase_s caps it short of run.min_steady_s)" if e.capped else ""
    return (f"c{e.concurrency}: {e.prompts} prompts give ~{e.one_pass_steady_s:.1f} s of steady state; "
            f"replaying the suite {e.passes}x for ~{e.planned_s:.0f} s{cap}")


def look_words(e: ev.Look) -> str:
    """One look of the stopping rule, in a line (harness.bench.decide)."""
    head = f"look {e.look}/{e.looks} after {e.repeats} repeats ({100 * e.level:.4g}% intervals)"
    parts = []
    if e.decided:
        parts.append("decided: " + ", ".join(e.decided))
    if e.undecided:
        parts.append("undecided: " + ", ".join(e.undecided))
    return head + (": " + "; ".join(parts) if parts else "") + (f"; {e.detail}" if e.detail else "")
