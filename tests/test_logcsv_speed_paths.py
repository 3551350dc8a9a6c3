"""harness.engines.sglang.logcsv's block path: one regex over a whole block of lines, rows from one
comprehension.

Every comparison is against the objects path (write_windows_csv(parse_file())). Small blocks put many
block edges in small logs, and a block only takes the block path once its layouts were learned, so
the tests check that path really wrote the rows. Lines of every format family (families.txt and
reference.txt) with their values changed, around the edge cases the path introduces: lines split
across blocks, \\r tqdm redraws, CRLF, a last line without newline, non-UTF-8 bytes, stamps that are
no dates, layouts changing within a block, lines too long to carry from block to block.
"""

from __future__ import annotations

import gc
import inspect
import io
import random
import re
from pathlib import Path

import pytest

from harness.engines.sglang import logcsv
from harness.engines.sglang.logcsv import write_log_csv
from harness.engines.sglang.logparse import IncrementalParser, parse_file
from tests.mangle import mangled_lines
from tests.test_logcsv import CANONICAL, EAGLE3_DECODE, EAGLE3_PREFILL, TRICKY_NUMBERS, objects_csv

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = FIXTURES / "sglang-0.5.15.post1"
CAPTURE_LOGS = sorted([*CAPTURES.glob("*.log"), *(CAPTURES / "draftbench-run").glob("server-*.log.gz")])
FAMILY_FILES = [FIXTURES / "logs" / "families.txt", FIXTURES / "logs" / "reference.txt"]
STATS_LINES = [line for path in FAMILY_FILES for line in path.read_text("utf-8").split("\n")
               if "] Decode batch" in line or "] Prefill batch" in line]  # fmt: skip
DECODE = STATS_LINES[-1]  # 0.5.x, baseline
NOISE = [
    '[2026-08-20 03:03:04] INFO:     127.0.0.1:41090 - "GET /get_server_info HTTP/1.1" 200 OK',
    "Capturing batches (bs=16 avail_mem=69.74 GB):   8%|\u258a         | 1/12 [00:40<07:23, 40.33s/it]",
    "[2026-08-20 03:03:05] Cache not flushed because there are pending requests. "
    "#queue-req: 0, #running-req: 1",
    "",
]


@pytest.fixture
def block_rows(monkeypatch):
    """Counts the rows the block path wrote (block regexes compiled during the test are wrapped)."""
    counts = {"rows": 0}
    compile_block = logcsv._compile_block

    def counting(layouts):
        block = compile_block(layouts)

        def rows(found, no):
            made = block.rows(found, no)
            counts["rows"] += len(made)
            return made

        return block._replace(rows=rows)

    monkeypatch.setattr(logcsv, "_compile_block", counting)
    monkeypatch.setattr(logcsv, "_blocks", {})
    return counts


def fast_csv(path: Path, **kwargs) -> bytes:
    out = io.BytesIO()
    rows = write_log_csv(path, out, **kwargs)
    assert rows == out.getvalue().count(b"\n") - 1
    return out.getvalue()


def respell(line: str, rng: random.Random) -> str:
    """The line with new values: what SGLang prints, but in one line of 50 a spelling only the full
    parser reads right (a leading zero, an exponent, three decimals, a sign)."""
    odd = rng.random() < 0.02

    def value(m: re.Match[str]) -> str:
        if odd and rng.random() < 0.3:
            return rng.choice(["07", "1e3", "0.125", "-1", "2.50", "0.00", "10", "100.10"])
        if "." in m[0]:
            return f"{rng.uniform(0, 5000) if rng.random() < 0.5 else rng.random():.2f}"
        return str(rng.randint(0, 99999))

    return re.sub(r"(?<=: )[0-9]+(?:\.[0-9]+)?(?=,|$| |%)", value, line)


def mixed_log(lines: list[str], rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        if rng.random() < 0.3:
            out.append(rng.choice(NOISE))
        else:
            out.append(respell(rng.choice(lines), rng))
    return out


def test_the_module_default_is_parse_files_pending_limit():
    default = inspect.signature(IncrementalParser).parameters["max_pending"].default
    assert logcsv._MAX_PENDING == default
    assert inspect.signature(parse_file).parameters["chunk_size"].default == logcsv._CHUNK


@pytest.mark.parametrize("block_size", [1 << 9, 1 << 12, logcsv._BLOCK])
@pytest.mark.parametrize("path", CAPTURE_LOGS, ids=[f"{p.parent.name}/{p.name}" for p in CAPTURE_LOGS])
def test_captures_in_blocks_of_any_size(path, block_size, block_rows):
    expected = objects_csv(path)
    assert fast_csv(path, chunk_size=1 << 9, block_size=block_size) == expected
    if block_size == 1 << 9 and expected.count(b"\n") > 30:  # the first lines of a layout go line by line
        assert block_rows["rows"] >= 0.6 * expected.count(b"\n"), block_rows


@pytest.mark.parametrize("line", STATS_LINES, ids=[f"{i}:{line[:40]}" for i, line in enumerate(STATS_LINES)])
def test_every_family_layout_takes_the_block_path(tmp_path, line, block_rows):
    rng = random.Random(line)
    path = tmp_path / "family.log"
    path.write_text("\n".join([line, *mixed_log([line], rng, 300)]) + "\n", encoding="utf-8")
    expected = objects_csv(path)
    assert fast_csv(path, chunk_size=1 << 10, block_size=1 << 11) == expected
    if expected.count(b"\n") > 150:  # lines the full parser rejects (a cut-off line) give no rows
        assert block_rows["rows"] > 100


def test_pairs_of_families_change_layouts_within_blocks(tmp_path, block_rows):
    # Two or three layouts of each kind take turns: the block regex holds the last used of each kind.
    rng = random.Random(8)
    lines = []
    for _ in range(40):
        lines += mixed_log(rng.sample(STATS_LINES, rng.choice([1, 2, 2, 3])), rng, rng.randint(5, 120))
    path = tmp_path / "pairs.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = objects_csv(path)
    for block_size in (1 << 10, 1 << 13, logcsv._BLOCK):
        assert fast_csv(path, chunk_size=1 << 10, block_size=block_size) == expected, block_size
    assert block_rows["rows"] > 1000


def test_mangled_lines_judged_one_by_one_by_the_block_regex(tmp_path, block_rows):
    # 64-byte blocks: nearly every line is a block of its own, taken or refused by the block regex.
    rng = random.Random(4321)
    sources = [EAGLE3_DECODE, EAGLE3_PREFILL, next(line for line in STATS_LINES if ".907 DP1" in line)]
    lines = list(sources)
    lines += mangled_lines(rng, sources, 1500, number_share=0.6,
                           numbers=re.compile(r"(?<=: )[0-9.]+|[0-9]+(?=[\]. ])"),
                           values=TRICKY_NUMBERS + CANONICAL * 3, edits=(1, 1))
    path = tmp_path / "mangled.log"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    assert fast_csv(path, chunk_size=64, block_size=64) == objects_csv(path)
    assert block_rows["rows"] > 150  # the lines the block regex takes


def test_lines_cut_by_every_block_edge(tmp_path):
    rng = random.Random(3)
    data = "\n".join([*mixed_log(STATS_LINES[:6], rng, 8), DECODE]).encode("utf-8")
    path = tmp_path / "edges.log"
    for text in (data + b"\n", data):  # the last line with and without its newline
        path.write_bytes(text)
        expected = objects_csv(path)
        for block_size in range(1, 400, 7):
            assert fast_csv(path, chunk_size=1, block_size=block_size) == expected, block_size


def test_crlf_tqdm_redraws_and_invalid_utf8_inside_blocks(tmp_path, block_rows):
    rng = random.Random(5)
    lines = [line.encode("utf-8") for line in mixed_log([DECODE, STATS_LINES[-2]], rng, 600)]
    for i in range(0, len(lines), 37):
        lines[i] = rng.choice([
            lines[i] + b"\r",  # CRLF
            b"\r  0%|   | 0/12 [00:00<?, ?it/s]\r" + lines[i],  # a tqdm bar the line was glued to
            lines[i] + b"\rCapturing batches 50%|#####     |",
            b"\xff\xfe(\xffEngine pid=1) " + lines[i],  # invalid UTF-8 in the prefix
            lines[i].replace(b"#running-req: ", b"#running-req: \xe2\x96"),  # and in a value
            b"\xe2\x96\x8a " + lines[i],
            lines[i][:-1],  # cut inside the last value
        ])  # fmt: skip
    path = tmp_path / "mixed.log"
    path.write_bytes(b"\r\n".join(lines[:50]) + b"\n" + b"\n".join(lines[50:]))  # no final newline
    expected = objects_csv(path)
    for block_size in (1 << 9, 1 << 12, logcsv._BLOCK):
        assert fast_csv(path, chunk_size=1 << 9, block_size=block_size) == expected, block_size
    assert block_rows["rows"] > 100


def test_stamps_that_are_no_dates(tmp_path, block_rows):
    # The block regex takes any 19 characters for the date; the block's distinct stamps are checked.
    stamp = "2026-04-05 20:02:51"
    bad = ["2026-04-05 20:02:5x", "2026-04-05T20:02:51", "[026-04-05 20:02:51", "2026-04-05 20:02]51",
           "2026-04-05 20:0\r:51", "\u0662026-04-05 20:02:51"[:19], "2026-04-05 20:02:51.12"]  # fmt: skip
    rng = random.Random(9)
    lines = mixed_log([DECODE], rng, 400)
    for i in range(100, 400, 50):
        lines[i] = DECODE.replace(stamp, rng.choice(bad))
    lines.append(DECODE.replace(stamp, stamp + ".123"))  # another head: the ms layout
    lines += mixed_log([DECODE.replace(stamp, stamp + ".123"), DECODE], rng, 200)
    path = tmp_path / "stamps.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = objects_csv(path)
    assert fast_csv(path, chunk_size=1 << 10, block_size=1 << 12) == expected
    assert block_rows["rows"] > 150


def test_many_distinct_stamps(tmp_path, monkeypatch):
    monkeypatch.setattr(logcsv, "_TIMES_MAX", 3)  # the set of known dates starts over often
    lines = [DECODE.replace("20:02:51", f"20:{m:02}:{s:02}") for m in range(60) for s in range(0, 60, 7)]
    path = tmp_path / "stamps.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert fast_csv(path, chunk_size=1 << 10, block_size=1 << 11) == objects_csv(path)


@pytest.mark.parametrize("before", [0, 1000, (1 << 16) - 300, (1 << 16) + 5000])
def test_a_line_too_long_to_carry_is_cut_where_parse_file_cuts_it(tmp_path, before):
    # parse_file keeps the last half of a line once more than 1 MiB of it is pending after a 64 KiB
    # read: whether this line keeps its stats depends on where the reads end, so on what precedes it.
    line = DECODE + ", largest-len: " + "z" * ((1 << 20) - len(DECODE) - 200)
    head = "x" * before + "\n" if before else ""
    path = tmp_path / "long.log"
    for tail in (line, line + "z" * 300, "y" * (3 << 20) + "\r" + line):
        path.write_text(head + tail + "\n" + DECODE + "\n", encoding="utf-8")
        expected = objects_csv(path)
        for block_size in (1 << 16, logcsv._BLOCK, 1 << 20, 8 << 20):
            assert fast_csv(path, block_size=block_size) == expected, (len(tail), block_size)


def test_the_collector_is_left_as_it_was(tmp_path):
    path = tmp_path / "one.log"
    path.write_text(DECODE + "\n", encoding="utf-8")
    assert gc.isenabled()
    write_log_csv(path, io.BytesIO())
    assert gc.isenabled()
    gc.disable()
    try:
        write_log_csv(path, io.BytesIO())
        assert not gc.isenabled()
    finally:
        gc.enable()
