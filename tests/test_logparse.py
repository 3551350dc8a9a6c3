"""harness.engines.sglang.logparse on real-format SGLang scheduler lines only.

Sources: the real 0.5.15.post1 captures; tests/fixtures/logs/reference.txt (the lines quoted in
REFERENCE.md §1.6, verbatim); tests/fixtures/logs/families.txt (every format family, built from
the §1.3/§1.5 format strings). In both fixture files each line is preceded by a comment holding
its version family and the expected fields, written by hand from the line text.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import pickle
import random
import re
from pathlib import Path

import pytest

from harness.engines.sglang import logline
from harness.engines.sglang.logparse import (
    WINDOW_CSV_COLUMNS,
    IncrementalParser,
    LogWindow,
    combine_windows,
    iter_windows,
    parse_file,
    parse_line,
    write_windows_csv,
)
from tests.mangle import PIECES, damage

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = FIXTURES / "sglang-0.5.15.post1"
EAGLE3_LOG = CAPTURES / "server-eagle3.log"
BASELINE_LOG = CAPTURES / "server-baseline.log"
FAMILIES = FIXTURES / "logs" / "families.txt"
REFERENCE = FIXTURES / "logs" / "reference.txt"

INT_FIELDS = ("line", "running_req", "queue_req", "num_tokens", "new_seq", "new_token", "cached_token",
              "iteration")  # fmt: skip
FLOAT_FIELDS = ("token_usage", "accept_len", "accept_rate", "gen_throughput", "input_throughput")


def expected_window(line: int, fields: dict) -> LogWindow:
    fields = dict(fields)
    fields["extra"] = tuple(tuple(pair) for pair in fields.get("extra", ()))
    return LogWindow(line=line, **fields)


def assert_types(w: LogWindow) -> None:
    """Values are the declared Python types, not just equal numbers (1 == 1.0 == True)."""
    for name in INT_FIELDS:
        value = getattr(w, name)
        assert value is None or type(value) is int, (name, value)
    for name in FLOAT_FIELDS:
        value = getattr(w, name)
        assert value is None or type(value) is float, (name, value)
    assert w.cuda_graph is None or type(w.cuda_graph) is bool
    assert all(type(k) is str and type(v) is str for k, v in w.extra)


def load_annotated(path: Path) -> list[tuple[int, str, str, dict | None]]:
    """(line number, family label, line text, expected fields or None) for each annotated line."""
    entries = []
    raw = path.read_bytes().decode("utf-8").split("\n")
    for i, text in enumerate(raw):
        nxt = raw[i + 1] if i + 1 < len(raw) else ""
        if text.startswith("# ") and " | " in text and nxt and not nxt.startswith("#"):
            label, _, expected = text[2:].rpartition(" | ")
            entries.append((i + 2, label, nxt, json.loads(expected)))
    return entries


FAMILY_ENTRIES = load_annotated(FAMILIES)
REFERENCE_ENTRIES = load_annotated(REFERENCE)


def stats_line_numbers(path: Path) -> list[int]:
    """What `grep -n -E '(Decode|Prefill) batch'` reports, computed without the parser."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [n for n, line in enumerate(text.split("\n"), 1) if re.search(r"(Decode|Prefill) batch", line)]


# --- every format family -----------------------------------------------------------------------


def test_families_fixture_covers_every_family_and_kept_trailing_commas():
    families = {label.split()[0] for _, label, _, _ in FAMILY_ENTRIES}
    assert families >= set("ABCDEFGHI")
    # An editor stripping trailing whitespace would silently turn these into another family.
    assert sum(text.endswith("#queue-req: 0, ") for _, _, text, _ in FAMILY_ENTRIES) >= 8


@pytest.mark.parametrize(
    ("line_no", "label", "text", "fields"),
    FAMILY_ENTRIES,
    ids=[f"L{e[0]}-{e[1][:40]}" for e in FAMILY_ENTRIES],
)
def test_family_line_parses_every_field(line_no, label, text, fields):
    window = parse_line(text, line_no)
    if fields is None:
        assert window is None
        return
    assert window == expected_window(line_no, fields)
    assert_types(window)


def test_trailing_comma_does_not_change_the_window():
    # Families A, B, E-H end with ", ", the others without; swap that on every line.
    for _, _, text, fields in FAMILY_ENTRIES:
        if fields is not None:
            other = text[:-2] if text.endswith(", ") else text + ", "
            assert parse_line(other, 1) == parse_line(text, 1), text


# --- REFERENCE.md §1.6 example lines (copied verbatim into reference.txt) ------------------------


@pytest.mark.parametrize(
    ("line_no", "label", "text", "fields"),
    REFERENCE_ENTRIES,
    ids=[e[1].split(" |")[0] for e in REFERENCE_ENTRIES],
)
def test_reference_example_line(line_no, label, text, fields):
    window = parse_line(text, line_no)
    assert window == expected_window(line_no, fields)
    assert_types(window)


@pytest.mark.parametrize("path", [FAMILIES, REFERENCE], ids=["families", "reference"])
def test_parse_file_on_fixture_numbers_lines_like_grep(path):
    expected = [expected_window(n, f) for n, _, _, f in load_annotated(path) if f is not None]
    assert list(parse_file(path)) == expected


# --- the real 0.5.15.post1 captures ------------------------------------------------------------


def test_eagle3_capture_yields_one_window_per_grep_match():
    windows = list(parse_file(EAGLE3_LOG))
    grep_lines = stats_line_numbers(EAGLE3_LOG)
    assert len(grep_lines) == 66  # grep -c -E '(Decode|Prefill) batch' server-eagle3.log
    assert [w.line for w in windows] == grep_lines
    assert sum(w.kind == "decode" for w in windows) == 57
    assert all(w.time.startswith("2026-11-29 10:1") and w.ranks == "" for w in windows)


def test_eagle3_capture_first_decode_window():
    first = next(w for w in parse_file(EAGLE3_LOG) if w.kind == "decode")
    # [2026-11-29 10:12:34] Decode batch, #running-req: 1, #token: 70, token usage: 0.00, accept len: 1.10,
    # accept rate: 0.03, cuda graph: True, gen throughput (token/s): 2.06, #queue-req: 0
    assert first == LogWindow(line=99, time="2026-11-29 10:12:34", kind="decode", running_req=1, queue_req=0,
                              token_usage=0.0, accept_len=1.10, accept_rate=0.03, cuda_graph=True,
                              gen_throughput=2.06, num_tokens=70)  # fmt: skip


def test_eagle3_capture_accept_len_values_and_cuda_graph():
    text = EAGLE3_LOG.read_bytes().decode("utf-8")
    expected = [float(v) for v in re.findall(r"Decode batch.*accept len: ([0-9.]+)", text)]
    decode = [w for w in parse_file(EAGLE3_LOG) if w.kind == "decode"]
    assert [w.accept_len for w in decode] == expected
    assert len(expected) == 57
    assert all(w.cuda_graph is True and w.accept_rate is not None for w in decode)
    prefill = [w for w in parse_file(EAGLE3_LOG) if w.kind == "prefill"]
    assert all(w.cuda_graph is False and w.extra == (("#pending-token", "0"),) for w in prefill)


def test_baseline_capture_has_no_accept_len():
    windows = list(parse_file(BASELINE_LOG))
    assert [w.line for w in windows] == stats_line_numbers(BASELINE_LOG)
    assert len(windows) == 66
    assert all(w.accept_len is None and w.accept_rate is None for w in windows)
    assert all(w.gen_throughput is not None for w in windows if w.kind == "decode")
    assert combine_windows(windows)["windows"] == 0


def test_failed_startup_captures_have_no_windows():
    for path in sorted((CAPTURES / "failed").glob("*.log")):
        assert list(parse_file(path)) == [], path


def test_combined_accept_len_matches_server_average_after_flush():
    # The probe flushed the cache (resetting the spec counters) before its burst, so /server_info's
    # avg_spec_accept_length covers exactly the decode windows after the flush; the log prints 2
    # decimals, hence the 0.005 tolerance.
    probe = json.loads((CAPTURES / "probe-eagle3.json").read_text())
    server_avg = probe["after/get_server_info"]["json"]["internal_states"][0]["avg_spec_accept_length"]
    lines = EAGLE3_LOG.read_bytes().decode("utf-8").split("\n")
    flushed_at = next(n for n, line in enumerate(lines, 1) if "Cache flushed successfully!" in line)
    after_flush = [w for w in parse_file(EAGLE3_LOG) if w.line > flushed_at]
    combined = combine_windows(after_flush)
    assert combined["windows"] == 12
    assert combined["accept_len"] == pytest.approx(server_avg, abs=0.005)


# --- combine_windows ---------------------------------------------------------------------------


def _decode(line, bs, accept_len, graph=True, gen=100.0, rate=None):
    return LogWindow(line=line, time="2026-11-29 10:12:34", kind="decode", running_req=bs, queue_req=0,
                     accept_len=accept_len, accept_rate=rate, cuda_graph=graph, gen_throughput=gen)


def test_combine_windows_weights_by_batch_size_and_skips_non_spec_windows():
    windows = [
        _decode(1, bs=1, accept_len=3.0, gen=100.0, rate=0.5),
        _decode(2, bs=3, accept_len=1.0, graph=False, gen=300.0, rate=0.0),
        _decode(3, bs=8, accept_len=None, gen=5000.0),  # baseline window: ignored
        LogWindow(line=4, time="t", kind="prefill", running_req=9, queue_req=0, input_throughput=10.0),
    ]
    combined = combine_windows(windows)
    assert combined["accept_len"] == pytest.approx((3.0 * 1 + 1.0 * 3) / 4)  # plain mean would be 2.0
    assert combined["accept_rate"] == pytest.approx(0.5 / 4)
    assert combined["windows"] == 2
    assert combined["weight"] == 4
    assert combined["cuda_graph_false"] == 1
    assert combined["gen_throughput_mean"] == pytest.approx(200.0)


def test_combine_windows_of_nothing():
    assert combine_windows([]) == {"accept_len": None, "accept_rate": None, "windows": 0, "weight": 0,
                                   "cuda_graph_false": 0, "gen_throughput_mean": None}  # fmt: skip


# --- malformed input ---------------------------------------------------------------------------

EAGLE3_DECODE = (
    "[2026-11-29 10:12:34] Decode batch, #running-req: 1, #token: 70, token usage: 0.00, accept len: 1.10, "
    "accept rate: 0.03, cuda graph: True, gen throughput (token/s): 2.06, #queue-req: 0"
)
EAGLE3_PREFILL = (
    "[2026-11-29 10:12:34] Prefill batch, #new-seq: 1, #new-token: 54, #cached-token: 3, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 64.74"
)


def test_truncated_decode_line_is_rejected_at_every_cut():
    assert parse_line(EAGLE3_DECODE) is not None
    assert [cut for cut in range(len(EAGLE3_DECODE)) if parse_line(EAGLE3_DECODE[:cut])] == []


def test_truncated_prefill_line_survives_only_where_it_looks_complete():
    full = parse_line(EAGLE3_PREFILL)
    survivors = []
    for cut in range(len(EAGLE3_PREFILL)):
        window = parse_line(EAGLE3_PREFILL[:cut])
        if window is not None:
            survivors.append(cut)
            assert (window.running_req, window.queue_req, window.new_token, window.token_usage) == (
                full.running_req, full.queue_req, full.new_token, full.token_usage)  # fmt: skip
    # Cut after a whole "key: value" (older families end with "#queue-req: N[, ]") or inside the last
    # number, the text is a valid shorter line; every other cut is rejected.
    ends = [EAGLE3_PREFILL.index(p) + len(p) for p in ("#queue-req: 0", "#pending-token: 0", "graph: False")]
    inside_last_number = range(len(EAGLE3_PREFILL) - len("4.74"), len(EAGLE3_PREFILL))
    assert survivors == [end + k for end in ends for k in (0, 1, 2)] + list(inside_last_number)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "Decode batch, #running-req: 1, #queue-req: 0",  # no timestamp
        "[not a time] Decode batch, #running-req: 1, #queue-req: 0",
        "[2026-11-29 10:12] Decode batch, #running-req: 1, #queue-req: 0",
        "[2026-11-29 10:12:34 tp0] Decode batch, #running-req: 1, #queue-req: 0",  # not a rank
        "[2026-11-29 10:12:34] Decode batch #running-req: 1, #queue-req: 0",  # no separator
        "[2026-11-29 10:12:34] Decode batch, ",
        "[2026-11-29 10:12:34] Decode batch [x], #running-req: 1, #queue-req: 0",
        "[2026-11-29 10:12:34] Decode batch [١٢], #running-req: 1, #queue-req: 0",  # non-ASCII digits
        "[2026-11-29 10:12:34] Decode batch, #running-req: one, #queue-req: 0",
        "[2026-11-29 10:12:34] Decode batch, #running-req: 1, #queue-req: 0, cuda graph: Maybe",
        "[2026-11-29 10:12:34] Decode batch, #running-req: 1, accept len: 2.0, #queue-req",
        "[2026-11-29 10:12:34] Decode batch, #running-req: 1, #token: 9, token usage: 0.00",  # no #queue-req
        "[2026-11-29 10:12:34] Decode batch, #running-req: 1, stray words, #queue-req: 0",
        "[2026-11-29 10:12:34] Decode batch, #running-req: 1\x00, #queue-req: 0",
    ],
)
def test_garbage_is_not_a_window(text):
    assert parse_line(text) is None


def test_mangled_real_lines_never_raise_and_fast_path_agrees_with_general_parser():
    rng = random.Random(1234)
    pieces = [p for p in PIECES if p not in ("\x85", '"', "%", ".", "0", "00", "5")]
    sources = [EAGLE3_DECODE, EAGLE3_PREFILL] + [e[2] for e in FAMILY_ENTRIES + REFERENCE_ENTRIES]
    fast_hits = 0
    for _ in range(4000):
        source = rng.choice(sources)
        text = damage(rng, source, pieces)
        window = parse_line(text, 3)
        if window is not None:
            assert window.kind in ("decode", "prefill") and window.line == 3
            assert_types(window)
        # The layout cache must never change a result: prime it with the unmangled line's layout.
        logline._parse_slow(source, 1)
        for seg in text.split("\r"):
            fast_hits += any(rx.fullmatch(seg) for recent in logline._fast.values() for rx, _ in recent)
            fast, slow = logline.parse_segment(seg, 3), logline._parse_slow(seg, 3)
            assert repr(fast) == repr(slow), seg  # repr: nan != nan
    assert fast_hits > 400  # the fast path really was exercised


def test_an_empty_last_value_gets_the_same_answer_whether_its_layout_is_cached_or_not():
    # The general parser rstrip()s the line, so "key: " at the end is no pair but "key: ," is one.
    logline._parse_slow(EAGLE3_DECODE + ", #pending-token: 0", 1)  # caches the layout's regex
    for text in (EAGLE3_DECODE + ", #pending-token: ", EAGLE3_DECODE + ", #pending-token:  "):
        assert parse_line(text) is None and logline._parse_slow(text, 1) is None
    text = EAGLE3_DECODE + ", #pending-token: ,"
    assert parse_line(text, 1) == logline._parse_slow(text, 1) is not None
    assert parse_line(text).extra == (("#pending-token", ""),)


def test_noise_around_the_bracket_is_ignored():
    expected = parse_line(EAGLE3_DECODE, 5)
    for prefix in ("(SGLangEngine pid=48213) ", "(SGLangEngine pid=1, ip=10.0.0.2) ",
                   "\x1b[36m(SGLangEngine pid=7)\x1b[0m ",
                   "Capturing batches (bs=1 avail_mem=69.55 GB): 100%|██████████| 12/12 "
                   "[00:01<00:00, 9.1it/s]"):
        assert parse_line(prefix + EAGLE3_DECODE, 5) == expected
    assert parse_line("\r  0%|          | 0/12\r" + EAGLE3_DECODE + "\r\n", 5) == expected


# --- files, streams and line numbers -----------------------------------------------------------


def test_parse_file_handles_crlf_tqdm_redraws_invalid_utf8_and_gzip(tmp_path):
    data = b"".join([
        b"[2026-11-29 10:12:30] start\r\n",
        b"\r  0%|          | 0/12 [00:00<?, ?it/s]\rCapturing batches (bs=16):   8%|\xe2\x96\x8a | 1/12\r\n",
        b"\xff\xfe garbage \x80\x81\n",
        b"(\xffEngine pid=1) " + EAGLE3_DECODE.encode() + b"\r\n",  # bad byte before the bracket only
        EAGLE3_DECODE.replace("#token: 70", "#token: 7\xff").encode("latin-1") + b"\n",  # corrupt value
        b"\rtqdm 100%|##########|\r" + EAGLE3_PREFILL.encode() + b"\n",
        EAGLE3_DECODE.encode(),  # last line without its newline
    ])  # fmt: skip
    plain = tmp_path / "server.log"
    plain.write_bytes(data)
    zipped = tmp_path / "server.log.gz"
    zipped.write_bytes(gzip.compress(data))
    expected = [parse_line(EAGLE3_DECODE, 4), parse_line(EAGLE3_PREFILL, 6), parse_line(EAGLE3_DECODE, 7)]
    assert None not in expected
    assert list(parse_file(plain)) == expected
    assert list(parse_file(zipped)) == expected
    assert list(parse_file(plain, chunk_size=7)) == expected


def test_crlf_and_gzip_copies_of_a_capture_give_the_same_windows(tmp_path):
    original = list(parse_file(EAGLE3_LOG))
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(EAGLE3_LOG.read_bytes().replace(b"\n", b"\r\n"))
    zipped = tmp_path / "eagle3.log.gz"
    zipped.write_bytes(gzip.compress(EAGLE3_LOG.read_bytes()))
    assert list(parse_file(crlf)) == original
    assert list(parse_file(zipped)) == original


def test_very_long_lines_do_not_hide_stats_lines(tmp_path):
    path = tmp_path / "long.log"
    with open(path, "w", encoding="utf-8") as f:
        f.write("x" * (3 << 20) + "\n")  # 3 MiB line of noise
        f.write("Capturing batches 50%|#####     |\r" * 50_000 + EAGLE3_DECODE + "\n")
        f.write(EAGLE3_PREFILL + "\n")
    assert list(parse_file(path, chunk_size=1 << 16)) == [
        parse_line(EAGLE3_DECODE, 2),
        parse_line(EAGLE3_PREFILL, 3),
    ]
    parser = IncrementalParser(max_pending=4096)
    got = parser.feed(b"y" * 100_000) + parser.feed(("\r" + EAGLE3_DECODE).encode()) + parser.feed(b"\n")
    assert got == [parse_line(EAGLE3_DECODE, 1)]


def test_incremental_parser_matches_parse_file_for_any_chunking():
    data = EAGLE3_LOG.read_bytes()
    expected = list(parse_file(EAGLE3_LOG))
    rng = random.Random(7)
    for max_chunk in (1, 3, 64, 4096):
        parser = IncrementalParser()
        got: list[LogWindow] = []
        pos = 0
        while pos < len(data):
            step = rng.randint(1, max_chunk)
            got += parser.feed(data[pos : pos + step])
            pos += step
        got += parser.flush()
        assert got == expected, max_chunk
        assert parser.line_no == data.count(b"\n") + 1


def test_incremental_parser_waits_for_the_newline_and_counts_from_start_line():
    parser = IncrementalParser(start_line=41)
    head, tail = EAGLE3_DECODE[:50].encode(), EAGLE3_DECODE[50:].encode()
    assert parser.feed(b"noise\n" + head) == []
    assert parser.line_no == 42
    assert parser.feed(tail) == []
    assert parser.feed(b"\n") == [parse_line(EAGLE3_DECODE, 42)]
    euro = "€".encode()  # a UTF-8 sequence split across feeds must not become U+FFFD
    assert (
        parser.feed(b"(" + euro[:1]) == [] and parser.feed(euro[1:] + b") " + EAGLE3_PREFILL.encode()) == []
    )
    assert parser.flush() == [parse_line(EAGLE3_PREFILL, 43)]


def test_iter_windows_numbers_items_like_grep():
    expected = list(parse_file(EAGLE3_LOG))
    with open(EAGLE3_LOG, encoding="utf-8", newline="\n") as f:
        assert list(iter_windows(f)) == expected
    text = EAGLE3_LOG.read_bytes().decode("utf-8")
    assert list(iter_windows(text.split("\n"))) == expected
    assert list(iter_windows([text])) == expected  # one item holding every line
    shifted = list(iter_windows(text.split("\n"), start_line=101))
    assert [w.line for w in shifted] == [w.line + 100 for w in expected]


# --- the LogWindow value and CSV ---------------------------------------------------------------


def test_parsed_windows_are_ordinary_frozen_log_windows():
    window = parse_line(EAGLE3_PREFILL, 3)
    rebuilt = LogWindow(**{f.name: getattr(window, f.name) for f in dataclasses.fields(LogWindow)})
    assert type(window) is LogWindow and window == rebuilt and hash(window) == hash(rebuilt)
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.accept_len = 2.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(window)) == window
    assert dataclasses.replace(window, line=4).line == 4


def test_write_windows_csv(tmp_path):
    windows = list(parse_file(FAMILIES))
    buf = io.StringIO()
    assert write_windows_csv(windows, buf) == len(windows)
    header, *rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert header[: len(WINDOW_CSV_COLUMNS)] == WINDOW_CSV_COLUMNS
    assert len(rows) == len(windows)
    path = tmp_path / "windows.csv"
    assert write_windows_csv(iter(windows), path) == len(windows)
    assert path.read_bytes().decode("utf-8") == buf.getvalue()
    for w, row in zip(windows, csv.DictReader(io.StringIO(buf.getvalue())), strict=True):
        assert int(row["line"]) == w.line and row["time"] == w.time and row["kind"] == w.kind
        for name in FLOAT_FIELDS:
            assert row[name] == ("" if getattr(w, name) is None else str(getattr(w, name)))
        assert row["cuda_graph"] == {None: "", True: "True", False: "False"}[w.cuda_graph]
        assert row["running_req"] == str(w.running_req) and row["ranks"] == w.ranks
        assert row["extra"] == ", ".join(f"{k}: {v}" for k, v in w.extra)
