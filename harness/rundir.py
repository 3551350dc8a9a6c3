"""The run directory: its name, its files and their columns."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

PHASE_COLUMNS = ["variant", "phase", "suite", "concurrency", "repeat", "requests", "errors",
                 "output_tokens", "wall_s", "server_accept_len", "last_gen_throughput"]
WINDOW_COLUMNS = ["line", "time", "kind", "running_req", "queue_req", "token_usage", "accept_len",
                  "accept_rate", "cuda_graph", "gen_throughput", "input_throughput"]
SERVER_WINDOW_COLUMNS = ["variant", "phase", *WINDOW_COLUMNS]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def new_run_dir(results_dir: str | Path, plan_name: str) -> tuple[str, Path]:
    """results/<timestamp>-<plan>[-N]; created exclusively so two runs never share a directory."""
    base = Path(results_dir)
    base.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{_slug(plan_name)}"
    for n in range(1000):
        run_id = stem if n == 0 else f"{stem}-{n}"
        path = base / run_id
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / "logs").mkdir()
        return run_id, path
    raise RuntimeError(f"could not create a run directory under {base}")


def write_json(path: str | Path, data: Any) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_resume_plan(run_dir: str | Path) -> Any:
    """The plan of an interrupted run, re-read from its file with the run's recorded overrides."""
    from harness.config import load_plan
    from harness.errors import InputError

    prov_path = Path(run_dir) / "provenance.json"
    if not prov_path.exists():
        raise InputError(str(run_dir), None, None, "not a run directory (no provenance.json)")
    prov = json.loads(prov_path.read_text(encoding="utf-8"))
    plan_file = prov.get("plan_file") or ""
    if not Path(plan_file).exists():
        raise InputError(str(prov_path), None, "plan_file", f"the run's plan file is gone: {plan_file}")
    plan = load_plan(plan_file)
    if prov.get("target_workdir"):
        plan.target.workdir = prov["target_workdir"]
    return plan
