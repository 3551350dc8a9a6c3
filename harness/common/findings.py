"""What a preflight check found: one `Finding` per problem, rendered as a text table or JSON."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass

SEVERITIES = ("error", "warning", "info")
PLAN_WIDE = ""  # the `variant` of findings about the target or the plan as a whole


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    variant: str  # variant name, or PLAN_WIDE
    what: str  # the problem, one line
    why: str  # what goes wrong because of it
    fix: str  # what to change
    code: str  # stable identifier, e.g. "eagle3-drafter-with-eagle"

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


def error(variant: str, code: str, what: str, why: str, fix: str) -> Finding:
    return Finding("error", variant, what, why, fix, code)


def warning(variant: str, code: str, what: str, why: str, fix: str) -> Finding:
    return Finding("warning", variant, what, why, fix, code)


def info(variant: str, code: str, what: str, why: str = "", fix: str = "") -> Finding:
    return Finding("info", variant, what, why, fix, code)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def sort_findings(findings: Iterable[Finding], variant_order: list[str] | None = None) -> list[Finding]:
    """Errors first, then warnings, then info; plan-wide before variants, variants in plan order.
    Duplicates (same severity, variant, code and text) are dropped."""
    order = {name: i for i, name in enumerate(variant_order or [])}
    unique = list(dict.fromkeys(findings))
    return sorted(
        unique,
        key=lambda f: (
            SEVERITIES.index(f.severity),
            -1 if f.variant == PLAN_WIDE else order.get(f.variant, len(order)),
        ),
    )


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        out[f.severity] += 1
    return out


def summary_line(findings: list[Finding]) -> str:
    c = counts(findings)
    parts = [
        f"{c['error']} error{'s' if c['error'] != 1 else ''}",
        f"{c['warning']} warning{'s' if c['warning'] != 1 else ''}",
        f"{c['info']} info",
    ]
    return ", ".join(parts)


def findings_json(findings: Iterable[Finding]) -> str:
    items = list(findings)
    return json.dumps(
        {"errors": has_errors(items), "counts": counts(items), "findings": [asdict(f) for f in items]},
        indent=2,
    )


def _cells(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def render_findings(findings: Iterable[Finding], width: int = 110) -> str:
    """A text table: severity, variant, what, why, fix; long cells wrap inside their column."""
    items = list(findings)
    if not items:
        return "no findings: nothing to fix before starting the servers"
    var_w = min(max(len("variant"), *(len(f.variant or "(plan)") for f in items)), 24)
    sev_w = len("warning")
    rest = max(width - sev_w - var_w - 8, 45)  # 4 gaps of 2 spaces
    what_w = rest * 3 // 10
    why_w = rest * 4 // 10
    fix_w = rest - what_w - why_w
    widths = (sev_w, var_w, what_w, why_w, fix_w)

    def row(cols: list[list[str]]) -> list[str]:
        height = max(len(c) for c in cols)
        lines = []
        for i in range(height):
            cells = [(c[i] if i < len(c) else "").ljust(w) for c, w in zip(cols, widths, strict=True)]
            lines.append("  ".join(cells).rstrip())
        return lines

    out = row([[h] for h in ("severity", "variant", "what", "why", "fix")])
    out.append("  ".join("-" * w for w in widths))
    for f in items:
        out += row(
            [
                [f.severity],
                _cells(f.variant or "(plan)", var_w),
                _cells(f.what, what_w),
                _cells(f.why, why_w),
                _cells(f.fix, fix_w),
            ]
        )
    out.append("")
    out.append(summary_line(items))
    return "\n".join(out)
