"""Preflight checks (`draftbench check PLAN`): what would go wrong before any server starts.

findings = await run_checks(plan, target)      # gathers facts over the target, loads no model
print(render_findings(findings)); sys.exit(2 if has_errors(findings) else 0)  # `draftbench check`
"""

from harness.checks.preflight import run_checks
from harness.common.findings import Finding, findings_json, has_errors, render_findings, sort_findings

__all__ = ["Finding", "findings_json", "has_errors", "render_findings", "run_checks", "sort_findings"]
