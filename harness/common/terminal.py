"""Text from a server or a suite on its way to a terminal: control characters made visible.

A server's error body, a log line or a prompt id may carry ESC sequences (set the window title, clear the
screen, move the cursor) or C1 controls that a terminal obeys. Every such character is written as its
escape (`\\x1b`, `\\x9b`), so the text still reads and nothing reaches the terminal that it would act on.
Tabs and (where the text may span lines) newlines stay; a carriage return, which rewrites a line, does not.
"""

from __future__ import annotations

import re

# C0 except TAB and LF, DEL, the C1 block, and the bidirectional overrides that reorder what a line shows.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_ONE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: object, *, one_line: bool = False) -> str:
    """`text` with every control character a terminal acts on written as its escape; `one_line` also
    escapes newlines (a prompt id, a field shown inside one line)."""
    s = text if isinstance(text, str) else str(text)
    return (_CONTROLS_ONE_LINE if one_line else _CONTROLS).sub(_escape, s)
