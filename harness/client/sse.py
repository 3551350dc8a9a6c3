"""Incremental Server-Sent Events splitter: network reads in, `data` payloads of complete events out.

Follows the WHATWG event-stream rules that matter for OpenAI-style streams: events end at a blank line,
lines end with LF, CRLF or CR, `data:` loses one leading space, several `data:` lines join with LF,
lines starting with `:` are comments, other fields (`event:`, `id:`, `retry:`) are ignored. Events may
be split across reads at any byte, and one read may carry many events.
"""

from __future__ import annotations


class SSESplitter:
    """Feed raw bytes as they arrive; get back the data payload of every event completed by them."""

    __slots__ = ("_buf", "_after_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._after_cr = False

    def feed(self, data: bytes) -> list[bytes]:
        if self._after_cr:
            # The previous read ended in CR, already taken as a line end: an LF now completes that CRLF.
            self._after_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        buf = self._buf + data if self._buf else data
        if b"\r" in data:
            self._after_cr = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return []
        self._buf = buf[end + 2:]
        body = buf[:end]
        # Fast path: only one-line `data: ...` events, as every OpenAI-compatible server sends them;
        # then the only LFs are the separators, two per event boundary.
        if body[:6] == b"data: ":
            payloads = body[6:].split(b"\n\ndata: ")
            if body.count(b"\n") == 2 * (len(payloads) - 1):
                return payloads
        out: list[bytes] = []
        for block in body.split(b"\n\n"):
            if block:
                payload = _parse_block(block)
                if payload is not None:
                    out.append(payload)
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated by a blank line (non-empty at EOF means a cut stream)."""
        return self._buf.strip(b"\r\n")


def _parse_block(block: bytes) -> bytes | None:
    """General case: a block of lines between blank lines; None when it carries no data field."""
    data: list[bytes] = []
    for line in block.lstrip(b"\n").split(b"\n"):
        if not line or line[:1] == b":":
            continue
        name, sep, value = line.partition(b":")
        if name != b"data":
            continue
        if not sep:
            value = b""
        elif value[:1] == b" ":
            value = value[1:]
        data.append(value)
    if not data:
        return None
    return b"\n".join(data)
