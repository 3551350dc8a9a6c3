"""Every column of summary.csv, declared once (harness.analysis.columns): summary.py computes them in the
registry's dependency order, report.py's CLI table and the TUI's Results table take their columns,
headers and formats from here, and docs/metrics.md's column table is generated from it
(`python -m harness.analysis.summary_columns --update-docs docs/metrics.md`; a test holds them equal).

A new metric: one Column here plus its compute function in summary_rows.py (from the row's own records)
or summary_table.py (against another row). The order below is summary.csv's; a new column goes last.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis import summary_rows as r
from harness.analysis import summary_table as t
from harness.analysis.columns import Column, Registry, Shown, SummaryRow, docs_table, fmt_cell

REQ, PH, WIN, VAR = "requests.csv", "phases.csv", "server_windows.csv", "variants.jsonl"
AUDIT = "audit.jsonl"
ACCEPT_SOURCES = ("accept_len_requests", "accept_len_probe", "accept_len_server", "accept_len_log")
VS_BASELINE = ("variant", "concurrency", "baseline", "engine", "sampling")  # what finds a row's baseline
VERDICT_NEEDS = ("variant", "concurrency", "baseline", "engine", "sampling", "speedup")
STEPS = ("algorithm", *VS_BASELINE)
LOSSLESS = (*VS_BASELINE, "forced_acceptance")  # what finds the row's baseline, and a forced copy (no audit)


def ci_cell(row: SummaryRow) -> str:
    """The CI column: low-high of the speedup, with its level where it is not 95 %."""
    low, high = row.get("speedup_ci_low"), row.get("speedup_ci_high")
    if fmt_cell(low, "{}") == "-" or fmt_cell(high, "{}") == "-":
        return "-"
    level = row.get("ci_level")
    tail = "" if fmt_cell(level, "{}") == "-" or abs(float(level) - 0.95) < 1e-9 \
        else f" ({100 * float(level):.4g}%)"
    return f"{float(low):.2f}-{float(high):.2f}{tail}"


def _v(name: str, unit: str, kind: str, definition: str, shown: Shown | None = None) -> Column:
    """A verdict column: summary_table.verdict fills it from the requests' timing (analysis.verdicts)."""
    return Column(name, unit, kind, definition, f"{REQ}, {PH}, decisions.jsonl", t.verdict,
                  needs=VERDICT_NEEDS, scope="table", shown=shown)


COLUMNS = Registry([
    Column("variant", "", "str", "the variant's name in the plan", VAR, r.variant,
           shown=Shown(10, "variant", default=True)),
    Column("concurrency", "requests", "int", "requests kept in flight (closed loop); 0 for a variant that "
           "never measured", PH, r.concurrency, shown=Shown(20, "conc", "{:.0f}", default=True)),
    Column("algorithm", "", "str", "the speculative algorithm (EAGLE3, ...); empty for a baseline", VAR,
           r.algorithm, shown=Shown(30, "algo")),
    Column("requests", "requests", "int", "requests that succeeded", REQ, r.requests,
           shown=Shown(40, "reqs", "{:.0f}")),
    Column("errors", "requests", "int", "requests that failed", REQ, r.errors,
           shown=Shown(50, "err", "{:.0f}")),
    Column("output_tokens", "tokens", "int", "output tokens over the row's phases (the server's usage)", PH,
           r.output_tokens),
    Column("accept_len", "tokens/step", "float", "the accept length the table shows: the first of requests, "
           "probe (checked within 5 %), server, log, probe (unchecked); speculative rows only", "",
           r.headline, needs=("algorithm", *ACCEPT_SOURCES),
           shown=Shown(60, "accept len", "{:.2f}", default=True)),
    Column("accept_rate", "", "float", "(accept_len - 1) / (num_draft_tokens - 1)", "", r.accept_rate,
           needs=("accept_len", "num_draft_tokens"), shown=Shown(70, "accept rate", "{:.2f}")),
    Column("tok_s", "tok/s", "float", "output tokens / the phases' wall time (prefill, queueing and tail "
           "included)", PH, r.tok_s, needs=("output_tokens",),
           shown=Shown(80, "tok/s", "{:.1f}", default=True)),
    Column("ttft_p50_ms", "ms", "float", "median time to the first content chunk", REQ, r.ttft_p50_ms,
           shown=Shown(100, "TTFT p50 ms", "{:.0f}")),
    Column("ttft_p90_ms", "ms", "float", "90th percentile of the time to the first content chunk", REQ,
           r.ttft_p90_ms),
    Column("itl_p50_ms", "ms", "float", "median inter-token latency per token (a chunk of n tokens after a "
           "gap g gives n samples of g/n), pooled over requests", REQ, r.itl_p50_ms,
           shown=Shown(110, "ITL p50 ms", "{:.1f}")),
    Column("speedup", "x", "float", "tok_s / the tok_s of the row's engine's baseline at the same "
           "concurrency, over the repeats the row has (under run.stop: decided the baseline may have more)",
           "", t.speedup, needs=("tok_s", *VS_BASELINE), scope="table",
           shown=Shown(120, "speedup", "{:.2f}x", default=True)),
    Column("break_even_accept_len", "tokens/step", "float", "the accept length at which the variant's "
           "decode speed equals the baseline's: step_ms_ratio, else accept_len / speedup", "",
           t.break_even_accept_len, needs=("step_ms_ratio", "accept_len", "speedup", "baseline", "algorithm"),
           scope="table", shown=Shown(150, "break-even AL", "{:.2f}", default=True)),
    Column("status", "", "str", "ok, failed or running, as the run last recorded the variant (unknown: no "
           "record)", VAR, r.status),
    Column("simulated", "", "bool", "measured on a stand-in, not a GPU", VAR, r.simulated),
    Column("baseline", "", "bool", "the row is its engine's baseline (no speculation)", VAR, r.baseline),
    Column("drafter", "", "str", "the drafter's name", VAR, r.drafter),
    Column("num_steps", "", "int", "speculative steps per verify, as the plan set them", VAR, r.num_steps),
    Column("eagle_topk", "", "int", "draft branches per step, as the plan set them", VAR, r.eagle_topk),
    Column("num_draft_tokens", "tokens", "int", "draft tokens per verify step as the server resolved them "
           "(num_steps + 1 for topk 1)", VAR, r.num_draft_tokens),
    Column("cuda_graph", "", "bool", "CUDA graphs on for the variant's server", VAR, r.cuda_graph),
    Column("accept_len_requests", "tokens/step", "float", "Σ (completion tokens − 1) / Σ verify steps "
           "over the timed requests' per-request spec stats", REQ, r.accept_len_requests),
    Column("accept_len_server", "tokens/step", "float", "the server's counter after each phase's cache "
           "flush, verify-weighted over phases; failed flushes left out", PH, r.accept_len_server),
    Column("accept_len_log", "tokens/step", "float", "the Decode log windows' accept length, weighted by "
           "running requests", WIN, r.accept_len_log),
    Column("accept_sources_agree", "", "bool", "the timed (else probe), server and log accept lengths lie "
           "within 5 % of each other", "", r.accept_sources_agree, needs=("algorithm", *ACCEPT_SOURCES)),
    Column("accept_rate_log", "", "float", "the server's own printed accept rate, weighted by running "
           "requests", WIN, r.accept_rate_log),
    Column("decode_tok_s", "tok/s", "float", "per request (tokens after the first chunk) / (last chunk − "
           "first chunk), token-weighted over requests", REQ, r.decode_tok_s,
           shown=Shown(90, "decode tok/s", "{:.1f}")),
    Column("step_ms", "ms", "float", "1000 × accept_len (1 for a baseline) / decode_tok_s: time per step as "
           "one request sees it", "", r.step_ms, needs=("accept_len", "decode_tok_s")),
    Column("e2e_p50_ms", "ms", "float", "median request time, send to last chunk", REQ, r.e2e_p50_ms),
    Column("tokens_per_chunk", "tokens", "float", "mean tokens per content chunk over requests", REQ,
           r.tokens_per_chunk),
    Column("cuda_graph_false_windows", "windows", "int", "decode windows the server logged as run without "
           "CUDA graphs", WIN, r.cuda_graph_false_windows),
    Column("output_match", "", "float", "share of prompts both arms answered whose outputs equal the "
           "baseline's (temperature 0 only)", f"outputs.csv, {REQ}", t.output_match, needs=VS_BASELINE,
           scope="table", shown=Shown(160, "same output", "{:.2f}")),
    Column("slower_than_baseline", "", "bool", "verdict == slower", "", t.slower_than_baseline,
           needs=("baseline", "verdict"), scope="table"),
    Column("ttft_mean_ms", "ms", "float", "mean time to the first content chunk (beside the server's own)",
           REQ, r.ttft_mean_ms),
    Column("server_ttft_mean_ms", "ms", "float", "the server's mean TTFT over the phases (/metrics), "
           "weighted by the requests it counted", PH, r.server_ttft_mean_ms),
    Column("server_queue_mean_ms", "ms", "float", "the server's mean queue time over the phases (/metrics)",
           PH, r.server_queue_mean_ms),
    Column("accept_len_source", "", "str", "which source accept_len is: requests, probe, server, log or "
           "probe-unchecked", "", r.headline, needs=("algorithm", *ACCEPT_SOURCES)),
    Column("accept_len_probe", "tokens/step", "float", "the accept_len_requests formula over an untimed "
           "non-streaming replay of the phase's prompts", "spec_probe.csv", r.accept_len_probe),
    Column("break_even_batch", "requests", "int", "the running batch the variant's decode windows ran at "
           "most, among those both servers have a step time for", WIN, t.step_costs, needs=STEPS,
           scope="table"),
    Column("step_ms_ratio", "", "float", "verify_step_ms / decode_step_ms (the break-even accept length from "
           "step costs; the name tune reads)", WIN, t.step_costs, needs=STEPS, scope="table"),
    Column("verify_step_ms", "ms", "float", "the variant's verify step at break_even_batch (clean windows' "
           "median, else their 20th percentile)", WIN, t.step_costs, needs=STEPS, scope="table"),
    Column("decode_step_ms", "ms", "float", "the baseline's decode step at break_even_batch", WIN,
           t.step_costs, needs=STEPS, scope="table"),
    Column("ttft_cost_ms", "ms", "float", "mean over prompts both servers answered of (variant TTFT − "
           "baseline TTFT)", REQ, t.ttft_cost_ms, needs=VS_BASELINE, scope="table"),
    Column("first_divergence", "chars", "float", "median character where a differing output first departs "
           "from the baseline's", "outputs.csv", t.output_match, needs=VS_BASELINE, scope="table"),
    Column("flush_failed", "phases", "int", "phases whose cache flush failed", PH, r.flush_failed),
    Column("forced_acceptance", "tokens/step", "float", "the accept length a `draftbench breakeven` copy's "
           "server was told to force; empty for a real drafter", VAR, r.forced_acceptance),
    _v("repeats", "repeats", "int", "repeats measured for the row"),
    _v("mean_in_flight", "requests", "float", "the concurrency really offered: Σ (t_end − t_send) / (last "
       "t_end − first t_send), time-weighted over phases"),
    _v("steady_s", "s", "float", "the shortest steady state (every slot busy) among the row's phases"),
    _v("steady_tok_s", "tok/s", "float", "output tokens that arrived inside the steady states / their "
       "length"),
    _v("too_short", "", "bool", "the minimum-measurement guard tripped for this row's own phases"),
    _v("speedup_ci_low", "x", "float", "low end of the speedup's interval at ci_level"),
    _v("speedup_ci_high", "x", "float", "high end of the speedup's interval at ci_level"),
    _v("ci_method", "", "str",
       "bootstrap-prompts (+repeats where they disagree), t-repeats or bootstrap-windows"),
    _v("verdict", "", "str", "baseline, faster, slower, equivalent, undecided or too-short",
       shown=Shown(140, "verdict", default=True)),
    _v("verdict_reason", "", "str", "the interval with its level and method, or why there is no decision "
       "and what would decide it"),
    _v("ci_level", "", "float", "the interval's level: 0.95, or the level of the look the row stopped at"),
    _v("decide_look", "", "str", "under run.stop: decided, the look the row stopped at (k/K)"),
    _v("needs_repeats", "repeats", "int", "an undecided row: the repeats that would decide it if its "
       "estimate stays"),
    _v("needs_s", "s", "float", "what the missing repeats cost (both arms' mean phase wall time)"),
    Column("engine", "", "str", "the engine that served the variant (sglang, vllm)", VAR, r.engine,
           shown=Shown(12, "engine", default=True, across_engines=True)),
    Column("compared_with", "", "str", "the baseline the row's speedup and break-even are relative to", VAR,
           t.compared_with, needs=VS_BASELINE, scope="table",
           shown=Shown(14, "vs", default=True, across_engines=True)),
    Column("failure_reason", "", "str", "a failed variant's cause in a few words (its server's last log "
           "lines)", VAR, r.failure_reason),
    Column("decode_step_speedup", "x", "float", "accept_len × decode_step_ms / verify_step_ms: the speedup "
           "of steady decode at break_even_batch, tune's prediction from the row's own step costs", WIN,
           t.decode_step_speedup, needs=("accept_len", "verify_step_ms", "decode_step_ms"), scope="table"),
    Column("sampling", "", "str", "the sampler the row was measured at: its run.sampling arm (t0.7-p0.95), "
           "else t<run.temperature>; a row is compared with the baseline at the same (the variant's name "
           "carries the arm)", VAR, r.sampling),
    Column("lossless_verdict", "", "str", "greedy only: lossless (every divergence from the baseline at a "
           "near-tie, the rate within the control's, expectations kept), suspect or unresolved", f"{AUDIT}, "
           f"outputs.csv, {REQ}", t.lossless, needs=LOSSLESS, scope="table",
           shown=Shown(165, "lossless")),
    Column("divergence_rate", "", "float", "share of first-turn prompts both arms answered whose greedy "
           "answers differ", f"outputs.csv, {REQ}", t.lossless, needs=LOSSLESS, scope="table",
           shown=Shown(166, "diverged", "{:.2f}")),
    Column("control_divergence_rate", "", "float", "share of the baseline's answers at this concurrency that "
           "its untimed control pass (another concurrency, reverse order) answered differently", AUDIT,
           t.lossless, needs=LOSSLESS, scope="table", shown=Shown(167, "control", "{:.2f}")),
    Column("max_divergence_margin", "nats", "float", "the largest margin, logprob(baseline token) - "
           "logprob(variant token) in absolute value, at a first divergent position, in the baseline's own "
           "context", AUDIT, t.lossless,
           needs=LOSSLESS, scope="table", shown=Shown(168, "margin nats", "{:.2f}")),
    Column("lossless_detail", "", "str", "why the lossless verdict: the divergences, the rate test, the "
           "worst cases (prompt, token, both tokens, margin)", AUDIT, t.lossless, needs=LOSSLESS,
           scope="table"),
    Column("spec_source", "", "str", "where the row's per-request acceptance comes from: the timed "
           "requests' own response field, sglext (SGLang >= 0.5.19, sglext.spec_tokens_details) or metrics "
           "(vLLM >= 0.29, metrics.speculative_decoding); probe (an untimed non-streaming replay's "
           "meta_info, SGLang 0.5.13-0.5.18); empty: none (the server's counter and log only)",
           f"{REQ}, spec_probe.csv", r.spec_source, needs=("algorithm", "accept_len_probe")),
    Column("synthetic_suites", "", "str", "the suites marked synthetic (import-suite --synthetic) among "
           "those the row measured, space-separated: its numbers pool generated prompts, not real traffic's",
           f"{VAR}, {REQ}", r.synthetic_suites),
    # table only: drawn from other columns for display
    Column("speedup_ci", "x", "str", "speedup_ci_low-speedup_ci_high, with ci_level where it is not 95 %", "",
           None, needs=("speedup_ci_low", "speedup_ci_high", "ci_level"), scope="table",
           shown=Shown(130, "CI", default=True), cell=ci_cell),
])

SUMMARY_COLUMNS = COLUMNS.csv_columns
# (summary column, header, format) of every column the tables show: `--wide`, the TUI's Results; a table
# across engines adds the across-engine ones (report.table_columns)
TABLE_COLUMNS = [(c.name, c.shown.header, c.shown.fmt) for c in COLUMNS.shown() if c.shown
                 and not c.shown.across_engines]
DOCS_BEGIN = "<!-- columns: generated from harness/analysis/summary_columns.py -->"
DOCS_END = "<!-- end of columns -->"


def with_docs_table(text: str) -> str:
    """docs/metrics.md's text with the lines between DOCS_BEGIN and DOCS_END replaced by the registry's."""
    head, sep, rest = text.partition(DOCS_BEGIN)
    _, sep2, tail = rest.partition(DOCS_END)
    if not sep or not sep2:
        raise ValueError(f"no {DOCS_BEGIN!r} ... {DOCS_END!r} block")
    return head + DOCS_BEGIN + "\n" + "\n".join(docs_table(COLUMNS)) + "\n" + DOCS_END + tail


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.analysis.summary_columns [--update-docs docs/metrics.md]`: print the column table
    (markdown), or write it into that file between its markers."""
    from harness.analysis import summary_columns  # not __main__: the compute functions' modules by name

    p = argparse.ArgumentParser(prog="python -m harness.analysis.summary_columns", description=main.__doc__)
    p.add_argument("--update-docs", metavar="METRICS_MD")
    args = p.parse_args(argv)
    if args.update_docs:
        path = Path(args.update_docs)
        path.write_text(summary_columns.with_docs_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    print("\n".join(docs_table(summary_columns.COLUMNS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
