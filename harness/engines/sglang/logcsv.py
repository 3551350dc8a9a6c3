"""Scheduler log -> windows CSV without building ``LogWindow`` objects (``draftbench parse-log``).

``write_log_csv(path, out)`` writes exactly the bytes ``write_windows_csv(parse_file(path), out)``
writes, several times faster. A log repeats a few line layouts; for each layout seen, one bytes
regex matches a whole line and captures every cell already in its CSV spelling (a float's repr is
the printed ``%.2f`` text minus trailing zeros, so no number is converted).

The file is read in blocks of whole lines. One regex made of the layouts used last (two per kind)
runs over a whole block (``findall``: a tuple per line, the line numbers are the positions) and
one generated comprehension formats the rows. When a line no layout took holds ``] Decode batch``
or ``] Prefill batch`` (a new layout, ``\\r``, a prefix with brackets, a number whose repr reads
differently), or a stamp is no date, the block is done again line by line: each layout regex, then
the full parser for the lines they refuse, so rows, line numbers and rejected lines are those of
``parse_file``.
"""

from __future__ import annotations

import csv
import gc
import io
import os
import re
from collections.abc import Callable
from operator import itemgetter
from typing import IO, NamedTuple

from harness.engines.sglang.logline import FIELD_NAMES, LogWindow, field_positions, split_line
from harness.engines.sglang.logparse import IncrementalParser, iter_windows, open_log
from harness.engines.sglang.logwindows import WINDOW_CSV_HEADER, window_csv_row

__all__ = ["write_log_csv"]

# parse_file reads 64 KiB at a time and cuts a line once more than _MAX_PENDING characters of it
# are pending at the end of a read (IncrementalParser's max_pending). Blocks are whole reads and a
# line is carried into the next block only while it stays short enough never to be cut; a longer
# one goes through an IncrementalParser fed exactly those reads.
_CHUNK = 1 << 16
_MAX_PENDING = 1 << 20
_BLOCK = 2 * _CHUNK  # a block's tuples stay in the CPU cache: 1 MiB blocks were 15 % slower

# Value patterns: each captures exactly the cell write_windows_csv prints for the value, or fails.
# Possessive quantifiers (*+, ?+): no value needs backtracking, and they match faster.
_INT = rb"(0|[1-9][0-9]{0,17}+)"  # str(int(v)) == v; int() refuses over 4300 digits
# repr(float(v)) is v without its trailing zeros (one kept after the point) when v has at most 15
# significant digits and is >= 1e-4. SGLang prints "%.2f"; _FLOAT is for layouts that print more.
_FLOAT_2 = rb"((?:0|[1-9][0-9]{0,12}+)\.[0-9][1-9]?+)0?+"  # "2.50" -> "2.5", "0.00" -> "0.0", "2.05"
_FLOAT = rb"([1-9][0-9]{0,6}\.(?:[0-9]{0,7}[1-9]|0)|0\.(?:0{0,3}[1-9](?:[0-9]{0,13}[1-9])?|0))0*"
_SHORT_DECIMALS = re.compile(r"[0-9]+\.[0-9][0-9]?")
_BOOL = rb"(True|False)"
_TEXT = rb"([!#-+\--~]*+)"  # an unrecognised key's value: printable ASCII csv never quotes
_SKIP = rb"[^,\s]*+"  # a repeated key's value: neither printed nor checked
# The last value: "key: " is no pair once the full parser has rstrip()ped the line (but "key: ," is),
# so it must hold something rstrip() keeps (\x1c-\x1f and some non-ASCII characters are whitespace).
_TEXT_LAST = rb"([!#-+\--~]++)"
_SKIP_LAST = rb"[^,\s\x1c-\x1f\x80-\xff]++"
_FLOAT_FIELDS = {"token_usage", "accept_len", "accept_rate", "gen_throughput", "input_throughput"}
# "[date time[.ms][ RANKS]]" after a prefix without brackets, as in _HEAD_RE: the bracket is then the
# last "[" before the first "] Decode batch", as the full parser picks it.
_PREFIX = rb"[^\[\]\r\n]*+\["
_DATE = rb"[0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
_MS = rb"\.[0-9]{3}"
# A block regex takes any 19 characters for the date, and the block its distinct times are dates:
# a line's stamp repeats on many lines, and checking digits one by one is a tenth of its matching.
_ANY_DATE = rb".{19}"
_TIME_RE = re.compile(_DATE + b"(?:" + _MS + b")?")
# What str.rstrip() removes before the optional final comma, minus \r (a line with \r has segments).
_TAIL = rb",?+[ \t\x0b\x0c\x1c-\x1f]*+"
_COLUMN_AT = {name: WINDOW_CSV_HEADER.index(name) for name in ("time", "ranks", "iteration", *FIELD_NAMES)}
_MARKERS = (b"] Decode batch", b"] Prefill batch")  # every stats line has one (logline.split_line)

# What a regex is built for: kind, milliseconds?, rank names, iteration?, keys, 1-2 decimals per key.
_Shape = tuple[str, bool, tuple[str, ...], bool, tuple[str, ...], tuple[bool, ...]]


class _Layout(NamedTuple):
    match: Callable[[bytes], re.Match[bytes] | None]  # the line regex's fullmatch
    fmt: bytes  # the row's %-format: the line number, then the groups in ``order``
    pick: itemgetter  # fills ``fmt`` from (line number, *Match.groups())
    head: bytes  # the block regex up to "] Decode batch": prefix, time (any date), ranks (``heads`` groups)
    body: bytes  # the rest of the regex
    heads: int
    order: tuple[int, ...]  # group indexes in format order
    running: int  # the group of #running-req, never empty


_compiled: dict[_Shape, _Layout | None] = {}
_COMPILED_MAX = 512
_RECENT = 4  # layouts tried per kind, most recently used first
_TIMES_MAX = 1 << 10  # stamps known to be dates; a block has a few, a log one per second


class _Block(NamedTuple):
    findall: Callable[[bytes, int, int], list[tuple[bytes, ...]]]  # a tuple per line
    other: itemgetter  # a line no layout took, b"" for one a layout took
    times: tuple[itemgetter, ...]  # the time group of each head, b"" for a line no layout took
    rows: Callable[[list[tuple[bytes, ...]], int], list[bytes]]  # (tuples, first line number) -> rows


_blocks: dict[tuple[_Layout, ...], _Block] = {}


def write_log_csv(path: str | os.PathLike[str], out: str | os.PathLike[str] | IO[bytes] | IO[str],
                  *, chunk_size: int = _CHUNK, block_size: int = _BLOCK) -> int:  # fmt: skip
    """Write the windows CSV of a log file (plain or gzip) to a path or stream; returns the row count.
    ``chunk_size`` is parse_file's read size; ``block_size`` this function's (whole chunks)."""
    if isinstance(out, str | os.PathLike):
        with open(out, "wb") as f:
            return write_log_csv(path, f, chunk_size=chunk_size, block_size=block_size)
    write = out.write
    if isinstance(out, io.TextIOBase):  # the same text write_windows_csv would hand the stream
        write = lambda data: out.write(data.decode("utf-8"))  # noqa: E731
    write(_csv_bytes(WINDOW_CSV_HEADER))
    block_size = chunk_size * max(1, min(block_size // chunk_size, _MAX_PENDING // chunk_size + 1))
    # A block's findall tuples hold only bytes: the collector would walk them for nothing (~6 % here).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _write(path, write, chunk_size, block_size)
    finally:
        if collecting:
            gc.enable()


def _write(path: str | os.PathLike[str], write: Callable[[bytes], object], chunk_size: int,
           block_size: int) -> int:
    # A line read whole here has less than carry_max + block_size - chunk_size bytes before any read end.
    carry_max = _MAX_PENDING + chunk_size - block_size
    scanner = _Scanner()
    with open_log(path) as f:
        no = 1  # number of the next line to start
        end = 0  # file offset after the block
        carry = b""  # a line begun in an earlier block
        parser: IncrementalParser | None = None  # holds a line too long to carry
        while block := f.read(block_size):
            end += len(block)
            start = 0  # where the block's first line not yet written starts
            if parser is not None:  # the parser ends its line, in the state parse_file's would be
                nl = block.find(b"\n")
                write(scanner.windows(_feed(parser, block[: nl + 1] if nl >= 0 else block,
                                            end - len(block), chunk_size)))  # fmt: skip
                if nl < 0:
                    continue
                no, parser, start = parser.line_no, None, nl + 1
            elif carry and (nl := block.find(b"\n")) >= 0:
                start = nl + 1
                line = carry + block[:start]
                write(scanner.block(line, 0, len(line), no)[0])
                no, carry = no + 1, b""
            cut = block.rfind(b"\n", start) + 1  # the end of the block's last whole line
            if cut:
                rows, lines = scanner.block(block, start, cut, no)
                write(rows)
                no, carry = no + lines, block[cut:]
            else:
                carry += block[start:]
            if len(carry) > carry_max:
                parser = IncrementalParser(no)
                write(scanner.windows(_feed(parser, carry, end - len(carry), chunk_size)))
                carry = b""
        if carry:  # a last line without its newline
            parser = IncrementalParser(no)
            write(scanner.windows(_feed(parser, carry, end - len(carry), chunk_size)))
        if parser is not None:
            write(scanner.windows(parser.flush()))
    return scanner.rows


def _feed(parser: IncrementalParser, data: bytes, offset: int, chunk_size: int) -> list[LogWindow]:
    """Feed ``data``, read from ``offset``, cut where parse_file's reads end."""
    windows: list[LogWindow] = []
    i = 0
    while i < len(data):
        j = (offset + i) // chunk_size * chunk_size + chunk_size - offset
        windows += parser.feed(data[i:j])
        i = j
    return windows


class _Scanner:
    def __init__(self) -> None:
        self.rows = 0  # rows returned so far
        self._recent: dict[str, list[_Layout]] = {"decode": [], "prefill": []}
        self._times = {b""}  # times a block regex captured that are dates (b"": no layout's line)
        self._last: tuple[tuple[_Layout, ...], _Block] | None = None  # the block regex used last
        self._text = io.StringIO()
        self._writer = csv.writer(self._text, lineterminator="\n")

    def block(self, data: bytes, start: int, stop: int, no: int) -> tuple[bytes, int]:
        """The rows of the whole lines in ``data[start:stop]``, the first numbered ``no``; and their count."""
        if data.find(_MARKERS[0], start, stop) < 0 and data.find(_MARKERS[1], start, stop) < 0:
            return b"", data.count(b"\n", start, stop)
        layouts = (*self._recent["decode"][:2], *self._recent["prefill"][:2])
        if layouts:
            if self._last is not None and layouts == self._last[0]:  # == by identity: no regex hashing
                block = self._last[1]
            else:
                block = _blocks.get(layouts) or _compile_block(layouts)
                if len(_blocks) >= _COMPILED_MAX:
                    _blocks.clear()
                self._last = layouts, _blocks.setdefault(layouts, block)
            found = block.findall(data, start, stop)
            if self._all_taken(found, block):
                rows = block.rows(found, no)
                self.rows += len(rows)
                return b"".join(rows), len(found)
        lines = data[start : stop - 1].split(b"\n")  # the last line's \n ends the data
        return self.lines(lines, no), len(lines)

    def _all_taken(self, found: list[tuple[bytes, ...]], block: _Block) -> bool:
        """Whether the layouts took every stats line of a block, each with a real date."""
        others = b"\n".join(map(block.other, found))
        if _MARKERS[0] in others or _MARKERS[1] in others:
            return False
        times: set[bytes] = set()
        for time in block.times:
            times.update(map(time, found))
        new = times - self._times
        if new:
            if not all(map(_TIME_RE.fullmatch, new)):
                return False
            if len(self._times) > _TIMES_MAX:
                self._times = {b""}
            self._times |= new
        return True

    def lines(self, lines: list[bytes], no: int) -> bytes:
        """The rows of complete lines (without their ``\\n``), the first numbered ``no``."""
        decode, prefill = self._recent["decode"], self._recent["prefill"]  # updated in place
        rows: list[bytes] = []
        append = rows.append
        full_parsed = 0
        for n, line in enumerate(lines, no):
            i = line.find(b" batch")
            if i < 0:  # most lines: a stats line has " batch"
                continue
            recent = decode if line[i - 1] == 101 else prefill  # 101: "e" of Decode
            for layout in recent:
                m = layout[0](line)
                if m is not None:
                    append(layout[1] % layout[2]((n,) + m.groups()))
                    if layout is not recent[0]:  # block regexes take the layouts used last
                        recent.remove(layout)
                        recent.insert(0, layout)
                    break
            else:  # no layout took it; a tqdm bar ("Capturing batches") has no marker and no window
                if _MARKERS[0] in line or _MARKERS[1] in line:
                    append(self._full_parse(line, n))
                    full_parsed += 1
        self.rows += len(rows) - full_parsed
        return b"".join(rows)

    def windows(self, windows: list[LogWindow]) -> bytes:
        self.rows += len(windows)
        return b"".join(map(self._format, windows))

    def _full_parse(self, line: bytes, no: int) -> bytes:
        text = line.decode("utf-8", "replace")  # what the stream decoder gives: \n never ends a sequence
        windows = list(iter_windows([text], no))
        if len(windows) == 1 and "\r" not in text:
            shape = _shape(text)
            if shape is not None:
                self._learn(shape)
        return self.windows(windows)

    def _learn(self, shape: _Shape) -> None:
        compiled = _compiled.get(shape, False)
        if compiled is False:
            if len(_compiled) >= _COMPILED_MAX:
                _compiled.clear()
            compiled = _compiled[shape] = _compile(shape)
        if compiled is not None:
            recent = self._recent[shape[0]]
            recent[:] = [compiled, *(c for c in recent if c is not compiled)][:_RECENT]

    def _format(self, w: LogWindow) -> bytes:
        self._text.seek(0)
        self._text.truncate()
        self._writer.writerow(window_csv_row(w))
        return self._text.getvalue().encode("utf-8")


def _shape(line: str) -> _Shape | None:
    """What the layout regex for a line the full parser accepted is built from."""
    parts = split_line(line)
    if parts is None:
        return None
    kind, (time, ranks), iteration, kv = parts
    keys = tuple(kv[::2])
    positions = field_positions(keys)
    if positions is None:
        return None
    floats = {at for name, at in zip(FIELD_NAMES, positions[0], strict=True) if name in _FLOAT_FIELDS}
    short = tuple(i in floats and _SHORT_DECIMALS.fullmatch(v) is not None for i, v in enumerate(kv[1::2]))
    names = tuple(rank.rstrip("0123456789") for rank in ranks.split())
    return kind, "." in time, names, iteration is not None, keys, short


def _compile(shape: _Shape) -> _Layout | None:
    """The regex and row format of one line shape; None if the full parser rejects the layout."""
    kind, ms, rank_names, has_iteration, keys, short_decimals = shape
    positions = field_positions(keys)
    if positions is None:
        return None
    picks, extra_at = positions
    field_at = {at: name for name, at in zip(FIELD_NAMES, picks, strict=True) if at >= 0}
    columns = ["time"]  # column filled by each regex group, in group order; "" for "extra"
    head = b"(" + _DATE + (_MS if ms else b"") + b")"
    if rank_names:
        head += b" (" + b" ".join(re.escape(name.encode()) + b"[0-9]++" for name in rank_names) + b")"
        columns.append("ranks")
    heads = len(columns)
    pattern = [b"] Decode batch" if kind == "decode" else b"] Prefill batch"]
    if has_iteration:
        pattern.append(rb" \[" + _INT + rb"\]")
        columns.append("iteration")
    pattern.append(rb"[.,] ")
    for i, key in enumerate(keys):
        pattern.append((rb", " if i else b"") + re.escape(key.encode()) + b": ")
        name = field_at.get(i)
        if name is not None:
            columns.append(name)
            if name == "cuda_graph":
                pattern.append(_BOOL)
            elif name in _FLOAT_FIELDS:
                pattern.append(_FLOAT_2 if short_decimals[i] else _FLOAT)
            else:
                pattern.append(_INT)
        elif i in extra_at:
            columns.append("")
            pattern.append(_TEXT_LAST if i == len(keys) - 1 else _TEXT)
        else:
            pattern.append(_SKIP_LAST if i == len(keys) - 1 else _SKIP)
    pattern.append(_TAIL)
    cells = [b""] * len(WINDOW_CSV_HEADER)  # %-format of each cell
    cells[WINDOW_CSV_HEADER.index("kind")] = kind.encode()
    for column in columns:
        if column:
            cells[_COLUMN_AT[column]] = b"%s"
    if extra_at:
        cells[-1] = _extra_format([keys[i] for i in extra_at])
    cells[0] = b"%d"
    fmt = b",".join(cells) + b"\n"
    # The format takes its values left to right: the line number, then the groups sorted by column,
    # "extra" last in key order.
    order = sorted(range(len(columns)), key=lambda g: (_COLUMN_AT.get(columns[g], len(cells)), g))
    body = b"".join(pattern)
    return _Layout(re.compile(_PREFIX + head + body).fullmatch, fmt, itemgetter(0, *(g + 1 for g in order)),
                   _PREFIX + head.replace(_DATE, _ANY_DATE, 1), body, heads, tuple(order),
                   columns.index("running_req"))  # fmt: skip


def _compile_block(layouts: tuple[_Layout, ...]) -> _Block:
    """The block regex of some layouts and what turns its tuples into rows.

    Layouts with the same head share it, so a line's timestamp is matched once. The rows come from
    one generated comprehension that indexes the tuples directly (itemgetter was 30 % slower)."""
    by_head: dict[bytes, list[_Layout]] = {}
    for layout in layouts:
        by_head.setdefault(layout.head, []).append(layout)
    alternatives = []
    where: list[tuple[_Layout, list[int]]] = []  # each layout's groups in the findall tuple
    n = 0
    times = []  # the time group of each head
    for head, group in by_head.items():
        alternatives.append(head + b"(?:" + b"|".join(layout.body for layout in group) + b")")
        heads = list(range(n, n + group[0].heads))
        times.append(n)
        n += len(heads)
        for layout in group:
            count = len(layout.order) - layout.heads
            where.append((layout, heads + list(range(n, n + count))))
            n += count
    regex = re.compile(b"(?:" + b"|".join(alternatives) + rb")\n|([^\n]*+)\n")
    namespace: dict[str, object] = {}
    rows = ""  # f0 % (n, t[..], ...) if t[<#running-req of f0>] else f1 % (n, ...) ...
    for i, (layout, at) in enumerate(where):
        namespace[f"f{i}"] = layout.fmt
        row = f"f{i} % (n{''.join(f', t[{at[g]}]' for g in layout.order)})"
        rows += row if i == len(where) - 1 else f"{row} if t[{at[layout.running]}] else "
    taken = " or ".join(f"t[{time}]" for time in times)  # a layout took the line: its head matched
    source = f"def rows(found, no):\n return [{rows} for n, t in enumerate(found, no) if {taken}]"
    exec(compile(source, f"<logcsv rows {len(_blocks)}>", "exec"), namespace)
    times_of = tuple(map(itemgetter, times))
    return _Block(regex.findall, itemgetter(n), times_of, namespace["rows"])  # type: ignore[arg-type]


def _extra_format(keys: list[str]) -> bytes:
    """The "extra" cell with a %s per value. Values are never quoted, so the keys decide the quoting."""
    plain = ", ".join(f"{key}: 0" for key in keys)
    pairs = [key.encode().replace(b"%", b"%%") + b": %s" for key in keys]
    if _csv_bytes([plain]) == plain.encode() + b"\n":
        return b", ".join(pairs)
    return b'"' + b", ".join(p.replace(b'"', b'""') for p in pairs) + b'"'


def _csv_bytes(row: list[object]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(row)
    return text.getvalue().encode("utf-8")
