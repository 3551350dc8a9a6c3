"""Scheduler log -> windows CSV without building ``LogWindow`` objects (``draftbench parse-log``).

``write_log_csv(path, out)`` writes exactly the bytes ``write_windows_csv(parse_file(path), out)``
writes, several times faster. A log repeats a few line layouts; for each layout seen, one bytes
regex matches a whole line and captures every cell already in its CSV spelling (a float's repr is
the printed ``%.2f`` text minus trailing zeros, so no number is converted). Any line no layout
regex takes (a new layout, ``\\r``, a prefix with brackets, a number whose repr reads differently)
goes through the full parser, so rows, line numbers and rejected lines are those of ``parse_file``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Callable
from operator import itemgetter
from typing import IO

from harness.logline import FIELD_NAMES, LogWindow, field_positions, split_line
from harness.logparse import IncrementalParser, iter_windows, open_log
from harness.logwindows import WINDOW_CSV_HEADER, window_csv_row

__all__ = ["write_log_csv"]

# parse_file's read size: lines longer than IncrementalParser's max_pending are cut at the same places.
_CHUNK = 1 << 16

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
_TIME = rb"[^\[\]\r\n]*+\[([0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
# What str.rstrip() removes before the optional final comma, minus \r (a line with \r has segments).
_TAIL = rb",?+[ \t\x0b\x0c\x1c-\x1f]*+"
_COLUMN_AT = {name: WINDOW_CSV_HEADER.index(name) for name in ("time", "ranks", "iteration", *FIELD_NAMES)}

# What a regex is built for: kind, milliseconds?, rank names, iteration?, keys, 1-2 decimals per key.
_Shape = tuple[str, bool, tuple[str, ...], bool, tuple[str, ...], tuple[bool, ...]]
# (the regex's fullmatch, the row's %-format, what fills it from (line number, *Match.groups()))
_Layout = tuple[Callable[[bytes], re.Match[bytes] | None], bytes, itemgetter]
_compiled: dict[_Shape, _Layout | None] = {}
_COMPILED_MAX = 512
_RECENT = 4  # layouts tried per kind, most recently learned first


def write_log_csv(path: str | os.PathLike[str], out: str | os.PathLike[str] | IO[bytes] | IO[str],
                  *, chunk_size: int = _CHUNK) -> int:  # fmt: skip
    """Write the windows CSV of a log file (plain or gzip) to a path or stream; returns the row count."""
    if isinstance(out, str | os.PathLike):
        with open(out, "wb") as f:
            return write_log_csv(path, f, chunk_size=chunk_size)
    write = out.write
    if isinstance(out, io.TextIOBase):  # the same text write_windows_csv would hand the stream
        write = lambda data: out.write(data.decode("utf-8"))  # noqa: E731
    write(_csv_bytes(WINDOW_CSV_HEADER))
    scanner = _Scanner()
    with open_log(path) as f:
        no = 1  # number of the next line to start
        parser: IncrementalParser | None = None  # holds a line begun in an earlier chunk
        while chunk := f.read(chunk_size):
            lines = chunk.split(b"\n")  # complete lines but the first (if continued) and the last
            tail = lines.pop()
            if lines and parser is not None:  # the parser ends its line, in the state parse_file's would be
                write(scanner.windows(parser.feed(lines[0] + b"\n")))
                no, parser = parser.line_no, None
                del lines[0]
            write(scanner.lines(lines, no))
            no += len(lines)
            if tail:
                parser = parser or IncrementalParser(no)
                write(scanner.windows(parser.feed(tail)))
        if parser is not None:
            write(scanner.windows(parser.flush()))
    return scanner.rows


class _Scanner:
    def __init__(self) -> None:
        self.rows = 0  # rows returned so far
        self._recent: dict[str, list[_Layout]] = {"decode": [], "prefill": []}
        self._text = io.StringIO()
        self._writer = csv.writer(self._text, lineterminator="\n")

    def lines(self, lines: list[bytes], no: int) -> bytes:
        """The rows of complete lines (without their ``\\n``), the first numbered ``no``."""
        decode, prefill = self._recent["decode"], self._recent["prefill"]  # updated in place by _learn
        rows: list[bytes] = []
        append = rows.append
        full_parsed = 0
        for n, line in enumerate(lines, no):
            i = line.find(b" batch")
            if i < 0:  # most lines: a stats line has " batch"
                continue
            for match, fmt, pick in decode if line[i - 1] == 101 else prefill:  # 101: "e" of Decode
                m = match(line)
                if m is not None:
                    append(fmt % pick((n,) + m.groups()))
                    break
            else:  # no layout took it; a tqdm bar ("Capturing batches") has no marker and no window
                if b"] Decode batch" in line or b"] Prefill batch" in line:
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
    pattern = [_TIME, rb"\.[0-9]{3})" if ms else b")"]
    if rank_names:
        pattern.append(b" (" + b" ".join(re.escape(name.encode()) + b"[0-9]++" for name in rank_names) + b")")
        columns.append("ranks")
    pattern.append(b"] Decode batch" if kind == "decode" else b"] Prefill batch")
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
    # "extra" last in key order; pick() takes them from (line number, *Match.groups()).
    order = sorted(range(len(columns)), key=lambda g: (_COLUMN_AT.get(columns[g], len(cells)), g))
    return re.compile(b"".join(pattern)).fullmatch, fmt, itemgetter(0, *(g + 1 for g in order))


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
