"""The preflight before anything starts: `draftbench check`'s run_checks on the plan, and its errors stop the
command (exit 2) before any server is started, each in one line with its fix. `run`, `demo`, `breakeven`,
`tune`, `regen` and the TUI's Run go through here; `--no-check` skips it.

    await require_preflight(plan, plan_path)           # raises PreflightFailed (harness.common.errors)
    async for e in checked_run_plan(plan, **kw): ...   # the same, then run_plan (the TUI's run process)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.checks import run_checks
from harness.common.errors import PreflightFailed
from harness.common.findings import PLAN_WIDE, Finding
from harness.targets import open_target

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.serve.kept import KeptServer
    from harness.targets.base import Target

HINT = "`draftbench check PLAN` shows every finding; --no-check starts the servers anyway"


def blocking(findings: Iterable[Finding], variants: Iterable[str] | None = None) -> list[Finding]:
    """The errors that stop a start: plan-wide ones and those of the given variants (all when None)."""
    names = None if variants is None else set(variants)
    return [f for f in findings if f.severity == "error"
            and (f.variant == PLAN_WIDE or names is None or f.variant in names)]


def error_line(f: Finding, where: str | None = None) -> str:
    """One finding as one line: where, which variant, what, and the fix."""
    head = f"{where}: " if where else ""
    who = f"variant '{f.variant}': " if f.variant else ""
    return f"{head}preflight: {who}{f.what}" + (f"; fix: {f.fix}" if f.fix else "")


async def preflight(plan: Plan, target: Target | None = None) -> list[Finding]:
    """run_checks over the plan's target (one opened here and closed again unless given)."""
    own = target is None
    if own:
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    try:
        return await run_checks(plan, target)
    finally:
        if own:
            await target.close()


def own_ports(run_dir: str | Path | None) -> set[int]:
    """Ports of the servers a resumed run left up (started and never stopped, or kept): the run stops or
    reuses them itself, so its fixed port being taken by one of them is no reason to refuse."""
    path = Path(run_dir) / "servers.jsonl" if run_dir else None
    if path is None or not path.exists():
        return set()
    last: dict[int, dict[str, Any]] = {}
    port: dict[int, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry.get("pgid"), int):
                last[entry["pgid"]] = entry
                if isinstance(entry.get("port"), int):
                    port[entry["pgid"]] = entry["port"]
    return {port[p] for p, e in last.items() if p in port and e.get("state") in ("started", "kept")}


async def require_preflight(plan: Plan, where: str | None = None, *, target: Target | None = None,
                            variants: Iterable[str] | None = None,
                            resume_dir: str | Path | None = None) -> list[Finding]:
    """The preflight's findings; raises PreflightFailed when one blocks the given variants (all by default).
    A plan over several nodes (`targets:`) is checked per node by its own runs, not here."""
    if plan.targets:
        return []
    found = await preflight(plan, target)
    if plan.server.port in own_ports(resume_dir):  # the resumed run's own server holds it
        found = [f for f in found if f.code != "port-in-use"]
    bad = blocking(found, variants)
    if bad:
        lines = [error_line(f, where) for f in bad]
        lines[-1] += f" ({HINT})"
        raise PreflightFailed(lines)
    return found


def earlier_accept_lengths(results_dir: str | Path) -> dict[str, tuple[str, str, float]]:
    """Per drafter, the accept length the newest run under `results_dir` measured for it (its first
    speculative row that has one; forced-acceptance rows never count): what `check` holds against training
    time."""
    base = Path(results_dir)
    if not base.is_dir() or not any((d / "summary.csv").exists() for d in base.iterdir()):
        return {}  # no summarised run to read: nor pandas to import for it
    from harness.analysis.forced import is_forced
    from harness.analysis.runs import list_runs
    from harness.analysis.summary import load_summary, read_variants

    out: dict[str, tuple[str, str, float]] = {}
    for run in list_runs(results_dir):
        run_dir = Path(run.run_dir)
        if not (run_dir / "summary.csv").exists():
            continue
        meta = read_variants(run_dir)
        for row in load_summary(run_dir).to_dict("records"):
            drafter = str(meta.get(str(row.get("variant")), {}).get("drafter") or "")
            al = row.get("accept_len")
            if drafter and drafter not in out and not is_forced(row) and isinstance(al, float) and al == al:
                out[drafter] = (run.run_id, str(row["variant"]), al)
    return out


async def checked_run_plan(plan: Plan, *, results_dir: str | Path = "results", keep_servers: bool = False,
                           resume_dir: str | Path | None = None, target: Target | None = None,
                           adopt: list[KeptServer] | None = None) -> AsyncIterator[Any]:
    """require_preflight, then harness.bench.runner.run_plan with the same arguments (the TUI's Run)."""
    from harness.bench.runner import run_plan  # the SDK and pandas: not for `check` or a refused start

    await require_preflight(plan, target=target, resume_dir=resume_dir)
    async for event in run_plan(plan, results_dir=results_dir, keep_servers=keep_servers,
                                resume_dir=resume_dir, target=target, adopt=adopt):
        yield event
