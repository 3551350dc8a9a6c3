"""harness.engines.sglang.logcsv: the parse-log CSV writer must write exactly what
write_windows_csv(parse_file()) writes.

Every comparison below is against that objects path, on the real captures, the format-family fixtures
and mangled copies of their lines; the tests also check the regex fast path really took the lines.
"""

from __future__ import annotations

import gzip
import io
import random
import re
from pathlib import Path

import pytest

from harness import cli
from harness.engines.sglang import logcsv
from harness.engines.sglang.logcsv import write_log_csv
from harness.engines.sglang.logparse import parse_file, write_windows_csv
from tests.mangle import mangled_lines

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = FIXTURES / "sglang-0.5.15.post1"
ALL_LOGS = sorted(
    [*CAPTURES.glob("*.log"), *(CAPTURES / "failed").glob("*.log"),
     *(CAPTURES / "draftbench-run").glob("server-*.log.gz"), *(FIXTURES / "logs").glob("*.txt")]
)  # fmt: skip

EAGLE3_DECODE = (
    "[2026-11-29 10:12:34] Decode batch, #running-req: 1, #token: 70, token usage: 0.00, accept len: 1.10, "
    "accept rate: 0.03, cuda graph: True, gen throughput (token/s): 2.06, #queue-req: 0"
)
EAGLE3_PREFILL = (
    "[2026-11-29 10:12:34] Prefill batch, #new-seq: 1, #new-token: 54, #cached-token: 3, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 64.74"
)


def objects_csv(path: Path) -> bytes:
    buf = io.StringIO()
    write_windows_csv(parse_file(path), buf)
    return buf.getvalue().encode("utf-8")


@pytest.fixture
def counted(monkeypatch):
    """Counts the rows that came from the full parser rather than a layout regex."""
    counts = {"full": 0}
    windows = logcsv._Scanner.windows

    def counting(self, found):
        counts["full"] += len(found)
        return windows(self, found)

    monkeypatch.setattr(logcsv._Scanner, "windows", counting)
    return counts


def fast_csv(path: Path, counts: dict[str, int], **kwargs) -> tuple[bytes, int]:
    """The CSV and the number of rows the fast path wrote."""
    counts["full"] = 0
    out = io.BytesIO()
    rows = write_log_csv(path, out, **kwargs)
    assert rows == out.getvalue().count(b"\n") - 1
    return out.getvalue(), rows - counts["full"]


def test_fixture_paths_exist():
    names = {p.name for p in ALL_LOGS}
    assert {"server-eagle3.log", "server-baseline.log", "server-eagle3.log.gz", "families.txt",
            "reference.txt", "server-eagle3-no-cutlass.log"} <= names  # fmt: skip


@pytest.mark.parametrize("path", ALL_LOGS, ids=[f"{p.parent.name}/{p.name}" for p in ALL_LOGS])
def test_same_bytes_as_the_objects_path_on_every_fixture(path, counted):
    expected = objects_csv(path)
    got, fast_rows = fast_csv(path, counted)
    assert got == expected
    rows = expected.count(b"\n") - 1
    if path.name.startswith("server-") and rows:
        # A capture repeats a few layouts: the full parser only sees the first line of each.
        assert fast_rows >= rows - 8, (fast_rows, rows)


def test_captures_use_the_fast_path_for_nearly_every_row(counted):
    got, fast_rows = fast_csv(CAPTURES / "draftbench-run" / "server-eagle3.log.gz", counted)
    assert got.count(b"\n") - 1 == 192 and fast_rows >= 188


# --- values: each cell must be what str(int(v)) / repr(float(v)) / csv print -----------------------

TRICKY_NUMBERS = [
    "0", "00", "007", "10", "+5", "-1", "1_000", "١٢", "5" * 18, "5" * 19, "9" * 5000, "0.00", "0.50", "2.50",
    "2.05", "10.10", "100.00", "0.5", "5.", ".5", "5", "0.001", "0.0001", "0.00001", "0.000100", "123.456",
    "1234567.12345678", "12345678.1", "1234567890123.45", "12345678901234.5", "1e5", "1E-3", "nan", "inf",
    "-0.00", "01.50", "1_0.5", "٣.٥", "0.10", "True", "False", "true", "", "1.2.3", "0x10",
]  # fmt: skip
CANONICAL = ["0", "1", "12", "305", "0.00", "0.5", "0.01", "1.10", "2.05", "12.30", "9999.99"]
FIELDS = ["#running-req", "#token", "token usage", "accept len", "accept rate", "cuda graph",
          "gen throughput (token/s)", "#queue-req"]  # fmt: skip


def test_every_value_spelling_gives_the_objects_path_cell(tmp_path, counted):
    # The unchanged line first: its layout regex is learned, and then meets every spelling.
    lines = [EAGLE3_DECODE]
    values = dict(kv.split(": ") for kv in EAGLE3_DECODE.split("] Decode batch, ")[1].split(", "))
    for field in FIELDS:
        for number in TRICKY_NUMBERS:
            lines.append(EAGLE3_DECODE.replace(f"{field}: {values[field]}", f"{field}: {number}"))
    path = tmp_path / "values.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, fast_rows = fast_csv(path, counted)
    assert got == objects_csv(path)
    assert fast_rows >= 60  # the canonical spellings (0, 10, 0.50, 2.05, ...) took the regex


@pytest.mark.parametrize("name", ["_INT", "_FLOAT_2", "_FLOAT"])
def test_value_patterns_capture_exactly_the_python_spelling(name):
    # A pattern may refuse a value (the full parser then decides) but what it captures must be
    # the cell the objects path prints.
    pattern = re.compile(getattr(logcsv, name))
    convert = (lambda v: str(int(v))) if name == "_INT" else (lambda v: repr(float(v)))
    rng = random.Random(name)
    matched = 0
    for _ in range(20000):
        whole = "".join(
            rng.choice("0000123456789") for _ in range(rng.choice([1, 1, 2, 3, 7, 13, 14, 16, 19]))
        )
        frac = "".join(rng.choice("00000123456789") for _ in range(rng.choice([0, 1, 2, 2, 2, 3, 5, 8, 9])))
        text = whole if name == "_INT" else whole + ("." + frac if frac or rng.random() < 0.1 else "")
        m = pattern.fullmatch(text.encode())
        if m is not None:
            matched += 1
            assert m[1].decode() == convert(text), text
    assert matched > 3000


# --- layouts: prefixes, ranks, iteration, milliseconds, extra keys, trailing commas --------------


def test_layout_variants_and_extra_cells_that_need_quoting(tmp_path, counted):
    base = EAGLE3_DECODE
    variants = [
        base + ", ",
        base.replace("Decode batch,", "Decode batch."),
        base.replace("Decode batch,", "Decode batch [40960],"),
        base.replace("Decode batch,", "Decode batch [007],"),
        base.replace("10:12:34]", "10:12:34.123]"),
        base.replace("10:12:34]", "10:12:34 DP1 TP4 EP4]"),
        base.replace("10:12:34]", "10:12:34 ATTN_CP0 MOE_DP12]"),
        "(SGLangEngine pid=48213) " + base,
        "\x1b[36m(SGLangEngine pid=7)\x1b[0m " + base,
        base + ', largest-len: 812, we"ird: 5, a,b: 7, 100%: x',
        base + ", swa token usage: 0.05, #swa token: 1024",
        base + ", #pending-token: 0",
        base + ", #pending-token: ",
        base + ", #pending-token: ,",
        base.replace("cuda graph", "npu graph"),
        base.replace("#queue-req: 0", "#queue-req: 0, #running-req: 5"),  # a repeated key
        base + ", #running-req: \x1c",  # last value only what rstrip() removes: no window
        base + ", #running-req: 5\x1c",
        base + ", #running-req: 5\xa0",
        base + ", largest-len: \x1f",
        base.replace("token usage", "full token usage"),
        EAGLE3_PREFILL,
        EAGLE3_PREFILL + ", ",
        EAGLE3_PREFILL.replace("0.00,", "0.000,"),  # three decimals: the general float pattern
        EAGLE3_PREFILL.replace("#pending-token: 0", "#pending-token: a\x00b"),
    ]
    # Each variant twice: the first teaches the layout, the second and a changed copy take the regex.
    lines = []
    for v in variants:
        lines += [
            v,
            v,
            v.replace("#running-req: 1", "#running-req: 31").replace("#running-req: 0", "#running-req: 2"),
        ]
    path = tmp_path / "layouts.log"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    got, fast_rows = fast_csv(path, counted)
    assert got == objects_csv(path)
    assert b'"largest-len: 812, we""ird: 5, a,b: 7, 100%: x"' in got
    # Always the full parser (or no row): [007], the prefix with brackets, the empty #pending-token
    # twice, a\x00b, the values rstrip() empties and NBSP; any other layout the first time, at most.
    assert fast_rows >= 2 * (len(variants) - 8)


def test_mangled_lines_give_the_objects_path_rows(tmp_path, counted):
    rng = random.Random(4321)
    # Four decode layouts and a prefill one (a log has a few; the writer keeps 4 per kind at hand).
    families = (FIXTURES / "logs" / "families.txt").read_text("utf-8").split("\n")
    sources = [EAGLE3_DECODE, EAGLE3_PREFILL] + [
        line for line in families
        if line.startswith("[") and any(s in line for s in ("DP1 TP1]", "[40960]", "07:46:12]"))
    ]
    assert len(sources) == 5
    lines = list(sources)  # every layout is learned before its mangled copies arrive
    lines += mangled_lines(rng, sources, 3000, number_share=0.5,
                           numbers=re.compile(r"(?<=: )[0-9.]+|[0-9]+(?=\])"),
                           values=TRICKY_NUMBERS + CANONICAL)
    path = tmp_path / "mangled.log"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    got, fast_rows = fast_csv(path, counted)
    assert got == objects_csv(path)
    assert fast_rows > 250 and counted["full"] > 250  # both paths saw many of them


# --- files and streams -------------------------------------------------------------------------


def test_chunk_edges_crlf_tqdm_invalid_utf8_and_gzip(tmp_path, counted):
    data = b"".join([
        b"[2026-11-29 10:12:30] start\r\n",
        b"\r  0%|          | 0/12 [00:00<?, ?it/s]\rCapturing batches (bs=16):   8%|\xe2\x96\x8a | 1/12\r\n",
        b"\xff\xfe garbage \x80\x81\n",
        b"(\xffEngine pid=1) " + EAGLE3_DECODE.encode() + b"\r\n",
        EAGLE3_DECODE.replace("#token: 70", "#token: 7\xff").encode("latin-1") + b"\n",
        b"\rtqdm 100%|##########|\r" + EAGLE3_PREFILL.encode() + b"\n",
        (EAGLE3_DECODE.encode() + b"\n") * 40,
        "(€) ".encode() + EAGLE3_PREFILL.encode() + b"\r" + EAGLE3_DECODE.encode() + b"\n",
        EAGLE3_DECODE.encode(),  # last line without its newline
    ])  # fmt: skip
    plain = tmp_path / "server.log"
    plain.write_bytes(data)
    zipped = tmp_path / "server.log.gz"
    zipped.write_bytes(gzip.compress(data))
    expected = objects_csv(plain)
    assert expected.count(b"\n") == 1 + 45
    for chunk_size in (1, 7, 100, 333, 1 << 16):
        assert fast_csv(plain, counted, chunk_size=chunk_size)[0] == expected, chunk_size
    got, fast_rows = fast_csv(zipped, counted)
    assert got == expected and fast_rows >= 38


def test_very_long_lines(tmp_path):
    path = tmp_path / "long.log"
    with open(path, "w", encoding="utf-8") as f:
        f.write("x" * (3 << 20) + "\n")  # longer than IncrementalParser's max_pending
        f.write("Capturing batches 50%|#####     |\r" * 20_000 + EAGLE3_DECODE + "\n")
        f.write(EAGLE3_PREFILL + "\n")
    out = io.BytesIO()
    assert write_log_csv(path, out) == 2
    assert out.getvalue() == objects_csv(path)


def test_paths_text_and_binary_streams_get_the_same_csv(tmp_path):
    log = CAPTURES / "server-eagle3.log"
    text, binary, file = io.StringIO(), io.BytesIO(), tmp_path / "w.csv"
    assert write_log_csv(log, text) == write_log_csv(log, binary) == write_log_csv(log, file) == 66
    assert text.getvalue().encode() == binary.getvalue() == file.read_bytes() == objects_csv(log)


def test_cli_parse_log_to_stdout_and_to_a_file(tmp_path, capsys):
    log = CAPTURES / "server-eagle3.log"
    out = tmp_path / "w.csv"
    assert cli.main(["parse-log", str(log), "--csv", str(out)]) == 0
    assert "66 windows" in capsys.readouterr().err
    assert cli.main(["parse-log", str(log)]) == 0
    assert capsys.readouterr().out.encode() == out.read_bytes() == objects_csv(log)
