"""The argument types the shells parse with, in their own words on bad input (argparse.ArgumentTypeError);
the TUI's forms parse the same fields with them, so a value the CLI refuses the TUI refuses alike."""

from __future__ import annotations

import argparse
import re


def duration(text: str) -> float:
    """Seconds from 90s, 20m, 2h or a bare number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration such as 90m, 2h or 3600, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def positive_ints(text: str) -> list[int]:
    """A comma-separated list of positive integers (concurrency levels, num_steps values)."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def levels_or_auto(text: str) -> list[int] | str:
    """Concurrency levels, or "auto": tune finds where speculation stops paying
    (harness.studies.tune_crossover)."""
    return "auto" if text.strip().lower() == "auto" else positive_ints(text)


def graphs(text: str) -> list[bool]:
    """CUDA graphs on, off or both: the values a tune tries."""
    table = {"on": [True], "off": [False], "both": [True, False]}
    if text not in table:
        raise argparse.ArgumentTypeError("expected on, off or both")
    return table[text]
