"""CSV output and aggregation of parsed scheduler log windows (see ``harness.engines.sglang.logparse``)."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from typing import IO

from harness.engines.sglang.logline import LogWindow

WINDOW_CSV_COLUMNS = ["line", "time", "kind", "running_req", "queue_req", "token_usage", "accept_len",
                      "accept_rate", "cuda_graph", "gen_throughput", "input_throughput"]  # fmt: skip
# Written after the contract columns; "extra" holds unrecognised pairs as "key: value, key: value".
WINDOW_CSV_HEADER = [*WINDOW_CSV_COLUMNS, "num_tokens", "new_seq", "new_token", "cached_token", "ranks",
                     "iteration", "extra"]  # fmt: skip


def write_windows_csv(windows: Iterable[LogWindow], out: str | os.PathLike[str] | IO[str]) -> int:
    """Write windows as CSV (contract columns first, empty cells where absent); returns the row count."""
    if isinstance(out, str | os.PathLike):
        with open(out, "w", newline="", encoding="utf-8") as f:
            return write_windows_csv(windows, f)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(WINDOW_CSV_HEADER)
    rows = 0
    for w in windows:
        writer.writerow(window_csv_row(w))
        rows += 1
    return rows


def window_csv_row(w: LogWindow) -> list[object]:
    """The cells of one window in ``WINDOW_CSV_HEADER`` order, for ``csv.writer`` (None -> empty)."""
    return [
        w.line, w.time, w.kind, _cell(w.running_req), _cell(w.queue_req), _cell(w.token_usage),
        _cell(w.accept_len), _cell(w.accept_rate), _cell(w.cuda_graph), _cell(w.gen_throughput),
        _cell(w.input_throughput), _cell(w.num_tokens), _cell(w.new_seq), _cell(w.new_token),
        _cell(w.cached_token), w.ranks, _cell(w.iteration), ", ".join(f"{k}: {v}" for k, v in w.extra),
    ]  # fmt: skip


def _cell(value: object) -> object:
    return "" if value is None else value


def combine_windows(windows: Iterable[LogWindow]) -> dict[str, float | int | None]:
    """Aggregate the decode windows that report an accept length.

    Each window's accept len is already a per-(request, step) mean over its decode iterations,
    whose denominator is the summed batch size. Weighting windows by ``running_req`` (the batch at
    print time, standing in for the window's mean batch) recovers the mean over all request-steps,
    i.e. what ``avg_spec_accept_length`` reports; a plain mean would let a batch of 1 count as much
    as a batch of 64. Returns ``accept_len`` / ``accept_rate`` (weighted, None if no weight; the
    rate's formula changed between SGLang versions, REFERENCE.md §1.4), ``windows``, ``weight`` (sum
    of running_req), ``cuda_graph_false`` (windows that ran eagerly) and ``gen_throughput_mean``
    (plain mean over the windows).
    """
    n = weight = graph_false = n_gen = 0
    sum_len = sum_rate = rate_weight = sum_gen = 0.0
    for w in windows:
        if w.kind != "decode" or w.accept_len is None:
            continue
        n += 1
        bs = w.running_req or 0
        weight += bs
        sum_len += w.accept_len * bs
        if w.accept_rate is not None:
            sum_rate += w.accept_rate * bs
            rate_weight += bs
        if w.cuda_graph is False:
            graph_false += 1
        if w.gen_throughput is not None:
            sum_gen += w.gen_throughput
            n_gen += 1
    return {
        "accept_len": sum_len / weight if weight else None,
        "accept_rate": sum_rate / rate_weight if rate_weight else None,
        "windows": n,
        "weight": weight,
        "cuda_graph_false": graph_false,
        "gen_throughput_mean": sum_gen / n_gen if n_gen else None,
    }
