"""Incremental Server-Sent Events splitter: network reads in, `data` payloads of complete events out.

Follows the WHATWG event-stream rules that matter for OpenAI-style streams: events end at a blank line,
lines end with LF, CRLF or CR, `data:` loses one leading space, several `data:` lines join with LF,
lines starting with `:` are comments, other fields (`event:`, `id:`, `retry:`) are ignored. Events may
be split across reads at any byte, and one read may carry many events.
"""

from __future__ import annotations

MAX_EVENT_BYTES = 16 << 20  # an event still open past this many bytes ends the request with EventTooLarge


class EventTooLarge(ValueError):
    """An event grew past MAX_EVENT_BYTES without its blank line: a broken or hostile server."""


class SSESplitter:
    """Feed raw bytes as they arrive; get back the data payload of every event completed by them.

    Linear in the bytes fed: an unterminated event's reads are kept as a list and joined once, when the
    blank line that ends it arrives; only the new read is searched for line ends."""

    __slots__ = ("_parts", "_size", "_after_cr", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._parts: list[bytes] = []  # reads of the event not yet ended, line ends already normalised
        self._size = 0
        self._after_cr = False
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        if self._after_cr:
            # The previous read ended in CR, already taken as a line end: an LF now completes that CRLF.
            self._after_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if not data:
            return []
        if b"\r" in data:
            self._after_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0 and not (data[:1] == b"\n" and self._parts and self._parts[-1].endswith(b"\n")):
            self._parts.append(data)
            self._size += len(data)
            if self._size > self.max_event_bytes:
                self._parts, self._size = [], 0
                raise EventTooLarge(f"an event over {self.max_event_bytes} bytes without its blank line")
            return []
        held = self._size
        buf = b"".join((*self._parts, data)) if self._parts else data
        end = held + end if end >= 0 else held - 1  # the blank line straddles the previous read and this one
        rest = buf[end + 2:]
        self._parts, self._size = ([rest], len(rest)) if rest else ([], 0)
        if self._size > self.max_event_bytes:
            self._parts, self._size = [], 0
            raise EventTooLarge(f"an event over {self.max_event_bytes} bytes without its blank line")
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
        return b"".join(self._parts).strip(b"\r\n")


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
