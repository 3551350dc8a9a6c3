"""SGLang scheduler log parser: files, live streams and line numbers (public API).

``parse_line`` turns one line into a ``LogWindow`` (see ``harness.engines.sglang.logline`` for the formats);
here lines are cut out of files and byte streams. Line numbers follow ``grep -n``: only ``\\n``
ends a line; ``\\r`` (tqdm redraws, CRLF) splits a physical line into segments that share its
number, and every segment is parsed. Invalid UTF-8 becomes U+FFFD; gzip files are read as such.
A whole file to CSV: ``harness.engines.sglang.logcsv.write_log_csv`` writes what
``write_windows_csv(parse_file())`` writes, several times faster (no LogWindow objects).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import os
from collections.abc import Iterable, Iterator
from typing import IO

from harness.engines.sglang.logline import LogWindow, parse_line, parse_segment
from harness.engines.sglang.logwindows import WINDOW_CSV_COLUMNS, combine_windows, write_windows_csv

__all__ = ["LogWindow", "parse_line", "iter_windows", "parse_file", "open_log", "IncrementalParser",
           "WINDOW_CSV_COLUMNS", "write_windows_csv", "combine_windows"]  # fmt: skip


def _scan(lines: list[str], first_no: int, out: list[LogWindow]) -> None:
    """Append the windows in ``lines`` (no ``\\n`` inside) numbered from ``first_no`` to ``out``."""
    parse = parse_segment
    append = out.append
    for no, line in enumerate(lines, first_no):
        if " batch" not in line:  # cheap filter: most log lines are not stats lines
            continue
        for seg in line.split("\r") if "\r" in line else (line,):
            try:
                window = parse(seg, no)
            except Exception:
                window = None
            if window is not None:
                append(window)


def iter_windows(lines: Iterable[str], start_line: int = 1) -> Iterator[LogWindow]:
    """Windows from an iterable of lines, numbered from ``start_line``.

    Each item is one line, with or without its ``\\n``; an item holding more ``\\n`` counts as
    several lines, so numbering always matches ``grep -n`` on the joined text.
    """
    no = start_line
    out: list[LogWindow] = []
    for item in lines:
        newlines = item.count("\n")
        if newlines == 0 or (newlines == 1 and item[-1] == "\n"):
            pieces = [item[:-1] if newlines else item]
        else:
            pieces = item.split("\n")
            if item[-1] == "\n":
                pieces.pop()
        _scan(pieces, no, out)
        no += len(pieces)
        if out:
            yield from out
            out.clear()


class IncrementalParser:
    """Parses a growing byte stream (a tailed log) into windows.

    ``feed`` returns the windows of every line completed by the new bytes; partial lines, and
    UTF-8 sequences split across feeds, wait for the next call. ``\\r``-terminated segments are
    parsed as soon as they are complete, so a tqdm bar redrawn for minutes does not pile up; a
    segment that grows beyond ``max_pending`` characters keeps only its tail (no stats line is
    that long). Invalid UTF-8 becomes U+FFFD.
    """

    def __init__(self, start_line: int = 1, *, max_pending: int = 1 << 20) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text of the current, unfinished line
        self._next_no = start_line  # number of the line being accumulated
        self._max_pending = max_pending

    @property
    def line_no(self) -> int:
        """Number of the line currently being accumulated (= complete lines seen + start_line)."""
        return self._next_no

    def feed(self, data: bytes | str) -> list[LogWindow]:
        text = self._decoder.decode(data) if isinstance(data, bytes | bytearray) else data
        out: list[LogWindow] = []
        if "\n" in text:
            lines = text.split("\n")
            lines[0] = self._pending + lines[0]
            self._pending = lines.pop()
            _scan(lines, self._next_no, out)
            self._next_no += len(lines)
        else:
            self._pending += text
        pending = self._pending
        if "\r" in pending:  # complete \r-segments of the unfinished line can be parsed now
            cut = pending.rfind("\r")
            _scan([pending[:cut]], self._next_no, out)
            self._pending = pending[cut + 1 :]
        if len(self._pending) > self._max_pending:
            self._pending = self._pending[-(self._max_pending // 2) :]
        return out

    def flush(self) -> list[LogWindow]:
        """End of stream: parse the last line even without its ``\\n``."""
        tail = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        out: list[LogWindow] = []
        if tail:
            _scan([tail], self._next_no, out)
            self._next_no += 1
        return out


@contextlib.contextmanager
def open_log(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A log file opened for binary reading, decompressed when it is gzip (detected by magic)."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        yield gzip.GzipFile(fileobj=raw) if gz else raw


def parse_file(path: str | os.PathLike[str], *, chunk_size: int = 1 << 16) -> Iterator[LogWindow]:
    """Stream the windows of a log file (plain or gzip, detected by magic) in constant memory."""
    with open_log(path) as f:
        parser = IncrementalParser()
        while chunk := f.read(chunk_size):
            yield from parser.feed(chunk)
        yield from parser.flush()
