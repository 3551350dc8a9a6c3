"""Random damage to real log lines, shared by the parser tests: cut, insert and replace a few characters,
or swap a number for a tricky one. Every test that mangles lines uses these, so they damage lines alike."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

PIECES = [", ", ": ", ",", "\r", "\x00", "\ufffd", "\xa0", "\x1c", "\x85", "\t", " ", "[", "]", "-1", "1e309",
          "nan", " TP0", "batch", "#queue-req: 0", "Decode", "Prefill", '"', "%", ".", "0", "00", "5"]


def damage(rng: random.Random, text: str, pieces: Sequence[str] = PIECES,
           edits: tuple[int, int] = (1, 3)) -> str:
    """Between edits[0] and edits[1] edits, each replacing up to 6 characters at a random place with a
    random piece (70 %) or nothing."""
    for _ in range(rng.randint(*edits)):
        at = rng.randrange(len(text) + 1)
        text = text[:at] + (rng.choice(pieces) if rng.random() < 0.7 else "") + text[at + rng.randint(0, 6):]
    return text


def swap_number(rng: random.Random, text: str, numbers: re.Pattern[str], values: Sequence[str]) -> str:
    """One number of the line (a match of `numbers`) replaced by one of `values`."""
    a, b = rng.choice([m.span() for m in numbers.finditer(text)])
    return text[:a] + rng.choice(values) + text[b:]


def mangled_lines(rng: random.Random, sources: Sequence[str], n: int, *, number_share: float = 0.0,
                  numbers: re.Pattern[str] | None = None, values: Sequence[str] = (),
                  edits: tuple[int, int] = (1, 3), pieces: Sequence[str] = PIECES) -> list[str]:
    """n damaged copies of lines drawn from `sources`: a number swapped (with probability number_share),
    else a few characters damaged."""
    out = []
    for _ in range(n):
        text = rng.choice(sources)
        if numbers is not None and rng.random() < number_share:
            out.append(swap_number(rng, text, numbers, values))
        else:
            out.append(damage(rng, text, pieces, edits))
    return out
