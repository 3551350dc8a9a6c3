"""HTTP/1.1 response wire format, pure functions: status line and headers, body framing, and the
incremental decoder of chunked transfer encoding (harness.client.http1 does the I/O)."""

from __future__ import annotations

import httpx2

MAX_HEAD = 64 * 1024  # bytes of status line + headers, and of one chunk-size line

# Chunked-decoder states (besides a positive count of data bytes still to come).
_SIZE, _DATA_CRLF, _TRAILER, _DONE = 0, -1, -2, -3


def parse_head(buf: bytes) -> tuple[int, list[tuple[bytes, bytes]], bool, bytes] | None:
    """(status, headers, HTTP/1.0?, bytes after the head), or None while the head is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx2.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise httpx2.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers, parts[0] == b"HTTP/1.0", buf[end + 4:]


def framing(method: str, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[str, int, bool]:
    """How the body ends ("empty", "chunked", "length" or "close"), its length, keep-alive."""
    keep_alive = True
    chunked = False
    length = -1
    for name, value in headers:
        lname = name.lower()
        if lname == b"transfer-encoding":
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
        elif lname == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise httpx2.RemoteProtocolError(f"malformed Content-Length {value[:40]!r}") from None
        elif lname == b"connection" and b"close" in value.lower():
            keep_alive = False
    if method == "HEAD" or status in (204, 304) or (length == 0 and not chunked):
        return "empty", 0, keep_alive
    if chunked:
        return "chunked", 0, keep_alive
    if length >= 0:
        return "length", length, keep_alive
    return "close", 0, False


class Dechunker:
    """Incremental decoder of `Transfer-Encoding: chunked`: raw reads in, body bytes out."""

    __slots__ = ("buf", "state")

    def __init__(self) -> None:
        self.buf = b""
        self.state = _SIZE

    @property
    def done(self) -> bool:
        return self.state == _DONE

    def feed(self, data: bytes) -> bytes:
        if self.state == _SIZE and not self.buf:
            # Fast path: a read that is exactly one whole chunk (a paced SSE stream, one event per read).
            i = data.find(b"\r\n", 0, 18)
            if i > 0:
                try:
                    size = int(data[:i], 16)
                except ValueError:
                    size = -1
                if size > 0 and len(data) == i + size + 4 and data.endswith(b"\r\n"):
                    return data[i + 2:-2]
        buf = self.buf + data if self.buf else data
        n = len(buf)
        pos = 0
        out: list[bytes] = []
        state = self.state
        while pos < n:
            if state > 0:  # inside a chunk: `state` data bytes to go
                end = pos + state
                if end > n:
                    out.append(buf[pos:])
                    state -= n - pos
                    pos = n
                    break
                out.append(buf[pos:end])
                pos = end
                state = _DATA_CRLF
            elif state == _DATA_CRLF:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise httpx2.RemoteProtocolError("malformed chunked body: no CRLF after chunk data")
                pos += 2
                state = _SIZE
            elif state == _SIZE:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > MAX_HEAD:
                        raise httpx2.RemoteProtocolError("malformed chunked body: size line too long")
                    break
                try:
                    size = int(buf[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx2.RemoteProtocolError(f"malformed chunk size {buf[pos:i][:40]!r}") from None
                pos = i + 2
                state = size if size > 0 else _TRAILER
            elif state == _TRAILER:  # trailer lines until an empty one
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                state = _DONE if i == pos else _TRAILER
                pos = i + 2
            else:  # _DONE: anything after the body is not ours (keep-alive is then off)
                break
        self.state = state
        self.buf = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)
