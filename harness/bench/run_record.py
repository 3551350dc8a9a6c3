"""What a run (harness.bench.runner._Run) writes besides its records, and how it reads its servers' logs:
provenance.json and plan.resolved.json, the summary at the end (with its alarms), and each log line turned
into a tagged window (server_windows.csv) and live alarms. Functions of the run, kept apart so the runner
stays the one seam of the measurement."""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING

import harness
from harness.analysis.rundir import WINDOW_COLUMNS, mark_incomplete, redact_plan, write_json
from harness.common import events as ev
from harness.engines import engine_of

if TYPE_CHECKING:
    from harness.bench.run_state import RunState
    from harness.serve.existing import ExistingServer
    from harness.serve.server import Server


def write_provenance(run: RunState, versions: dict[str, str | None], status: str) -> None:
    """provenance.json at the start of a run. A resume keeps the run's plan and its first start (when, where,
    with which engine versions) and adds itself to `resumes`; engine versions that changed since are said,
    since the rows before and after the resume then come from different engines."""
    path = run.run_dir / "provenance.json"
    if not (run.resume_dir and (run.run_dir / "plan.resolved.json").exists()):
        write_json(run.run_dir / "plan.resolved.json", redact_plan(run.plan.resolved_dict()))
    now = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "client_host": platform.node(),
           "engine_versions": versions}  # engine name -> version, as detected before the first start
    earlier: dict = {}
    if run.resume_dir and path.exists():
        with contextlib.suppress(OSError, ValueError):
            earlier = json.loads(path.read_text(encoding="utf-8"))
    first = {k: earlier.get(k, now[k]) for k in now} if earlier else now
    record = {
        "draftbench_version": harness.__version__, "run_id": run.run_id, "status": status,
        "plan": run.plan.name, "plan_file": str(Path(run.plan.source_path or "").resolve()),
        "target": run.plan.target.host, "target_workdir": str(run.plan.target.workdir),
        "simulated": bool(run.plan.target.simulated),
        "servers_not_started": [v.name for v in run.plan.variants if v.is_existing],
        **first,
    }
    if earlier:
        record["resumes"] = [*earlier.get("resumes", []), now]
        before = first.get("engine_versions") or {}
        changed = sorted(e for e in versions if e in before and before[e] != versions[e])
        if changed:
            said = ", ".join(f"{e} {before[e]} -> {versions[e]}" for e in changed)
            run.emit(ev.Alarm("", "warning", "resume-engine-changed",
                              f"resumed with other engine versions than the run started with ({said}): "
                              "rows measured before and after the resume come from different engines"))
    write_json(path, record)

# ------------------------------------------------------------------------------------------------


async def log_catch_up(server: Server | ExistingServer, mark: int, timeout: float = 2.0) -> None:
    """Wait (briefly) for our /get_server_info access line after `mark`: the phase's last windows get its
    tag."""
    deadline = time.monotonic() + timeout if server.has_log else 0.0
    while time.monotonic() < deadline:
        new = server.lines_seen - mark
        if new > 0 and any("server_info" in ln for ln in list(server.last_lines)[-min(new, 50):]):
            return
        await asyncio.sleep(0.02)

# ------------------------------------------------------------------------------------------------


def on_lines(run: RunState, variant: str, lines: list[str]) -> None:
    server = run._log_owner.get(variant)
    first = (server.lines_seen if server else len(lines)) - len(lines) + 1
    run.emit(ev.ServerLog(variant, tuple(lines)))
    tag = run.phase_tag.get(variant)
    engine = server.engine if server is not None else engine_of(
        run.plan, next((v for v in run.plan.variants if v.name == variant), None))
    for i, text in enumerate(lines):
        w = engine.parse_log_line(text, first + i)
        if w is None:
            continue
        row = {"variant": variant, "phase": tag or ""}
        row.update({k: getattr(w, k) for k in WINDOW_COLUMNS})  # every one a LogWindow field
        run.windows.append(row)
        run.emit(ev.LogWindow(variant, w, tag))
        for alarm in run.alarms.feed(variant, w):
            run.emit(alarm)


def summarise_at_end(run: RunState, complete: bool) -> str:
    from harness.analysis.summary import load_summary, summarise_run

    try:
        path = summarise_run(run.run_dir, complete=complete)
    except Exception as exc:  # a broken summary must not lose the records: they are on disk
        run.emit(ev.Alarm("", "error", "summary-failed", f"could not summarise: {exc}"))
        mark_incomplete(run.run_dir)  # provenance must not read "running" after the run has ended
        return ""
    from harness.checks.realism import training_alarms

    summary = load_summary(run.run_dir)
    for alarm in [*run.alarms.compare(summary), *training_alarms(run.plan, summary)]:
        run.emit(alarm)
    return str(path)
