"""Findings: order, the text table, JSON, the exit decision."""

from __future__ import annotations

import json

import pytest

from harness.checks import findings_json, has_errors, render_findings, sort_findings
from harness.common.findings import PLAN_WIDE, Finding, error, info, warning


def _sample() -> list[Finding]:
    long = "the drafter gets 7168-d hidden states instead of the 21504-d three-layer concat " * 3
    return [
        info("b", "x", "note"),
        warning("a", "w", "graphs off", "slow", "turn them on"),
        error("b", "e", "EAGLE-3 drafter served with EAGLE", long, "set algorithm: EAGLE3"),
        warning(PLAN_WIDE, "gpu-busy", "GPU 1 busy", "memory", "stop it"),
        warning("a", "w", "graphs off", "slow", "turn them on"),  # duplicate
    ]


def test_order_and_duplicates():
    out = sort_findings(_sample(), ["a", "b"])
    assert [(f.severity, f.variant, f.code) for f in out] == [
        ("error", "b", "e"),
        ("warning", "", "gpu-busy"),
        ("warning", "a", "w"),
        ("info", "b", "x"),
    ]


def test_table_wraps_inside_the_width():
    items = sort_findings(_sample(), ["a", "b"])
    table = render_findings(items, width=100)
    lines = table.splitlines()
    assert lines[0].split() == ["severity", "variant", "what", "why", "fix"]
    assert all(len(line) <= 100 for line in lines)
    assert "21504-d" in table and "(plan)" in table
    assert lines[-1] == "1 error, 2 warnings, 1 info"
    assert render_findings([]).startswith("no findings")


def test_json_and_exit_decision():
    items = sort_findings(_sample())
    data = json.loads(findings_json(items))
    assert data["errors"] is True and data["counts"] == {"error": 1, "warning": 2, "info": 1}
    assert set(data["findings"][0]) == {"severity", "variant", "what", "why", "fix", "code"}
    assert has_errors(items) and not has_errors([f for f in items if f.severity != "error"])


def test_severity_is_checked():
    with pytest.raises(ValueError, match="severity"):
        Finding("fatal", "", "x", "", "", "c")
