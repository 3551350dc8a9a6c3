"""The plan a resume runs: the run directory's own plan.resolved.json, never the plan file as it is now.

A resumed run must measure what the run started measuring, so the run directory is the source of truth:
its plan.resolved.json (drafters and suites inlined, what a TUI run picked) is loaded as written. The plan
file is read only for the values plan.resolved.json holds redacted (secret env values and flag values),
and, when the user passes one (`run --resume DIR --plan NEW`), to compare: the resume is refused with the
differences listed unless every one is in HARMLESS, settings that change no measured figure (how long to
wait, what to do with servers afterwards, where the key is read from). plan.resolved.json is never
rewritten by a resume (harness.bench.runner), so a later resume starts from the same plan again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from harness.analysis.rundir import REDACTED, redact_plan
from harness.common.errors import InputError
from harness.inputs.config import Plan, load_plan, upgraded_plan

RESOLVED = "plan.resolved.json"
# fields a resume may take from a changed plan: none of them changes a measured figure
HARMLESS = ("description", "run.request_timeout_s", "run.retries", "server.startup_timeout_s",
            "server.keep_running", "server.api_key_env", "variants[*].api_key_env")
_HARMLESS_RE = [re.compile(re.escape(p).replace(r"\[\*\]", r"\[[^\]]+\]") + "$") for p in HARMLESS]
SHOWN = 20  # differences listed in a refusal; the rest are counted
_MISSING = object()
# a difference between two plans: (path, value in the first, value in the second); _MISSING where absent
Diff = tuple[tuple, object, object]
# reads a plan file: (path, results dir) -> Plan
PlanReader = Callable[[Path, Path], Plan]


@dataclass
class ResumePlan:
    plan: Plan
    applied: list[str] = field(default_factory=list)  # harmless changes taken from the given plan
    file_differs: list[str] = field(default_factory=list)  # no plan given: how the plan file differs now


def resume_plan(run_dir: str | Path, plan_path: str | Path | None = None, *,
                load: PlanReader | None = None) -> ResumePlan:
    """The plan to resume `run_dir` with (see the module). `plan_path`: a plan the user passed; `load(path,
    results_dir)` reads a plan file (default `load_plan`; the CLI's also readies the demo's checkpoints)."""
    run_dir = Path(run_dir)
    read: PlanReader = load or (lambda path, _results: load_plan(path))
    prov = _read_json(run_dir / "provenance.json", run_dir, "not a run directory (no provenance.json)")
    resolved_path = run_dir / RESOLVED
    # a run directory from before plan.resolved.json: its plan file is all there is
    if not resolved_path.exists():
        return ResumePlan(_legacy_plan(run_dir, prov, plan_path, read))
    # a run from before the engines owned their options says target.launcher / sglang_version: compare (and
    # restore redacted values) in today's shape
    stored = upgraded_plan(_read_json(resolved_path, resolved_path, "cannot be read"))
    original = prov.get("plan_file") or ""
    source = Path(plan_path) if plan_path else \
        (Path(original) if original and Path(original).is_file() else None)
    current, unreadable = None, ""
    if source is not None:
        try:
            current = _load(source, run_dir, read)
        except InputError as exc:
            if plan_path:
                raise
            unreadable = str(exc)  # the run's own plan still resumes, unless a redacted value is needed
    applied: list[str] = []
    file_differs: list[str] = []
    data: object = stored
    if current is not None:
        diffs = differences(redact_plan(stored), redact_plan(current.resolved_dict()))
        harmful = [d for d in diffs if not harmless(d[0])]
        if plan_path and harmful:
            raise InputError(str(plan_path), None, None, refusal(run_dir, harmful))
        if plan_path:
            data = json.loads(json.dumps(stored))
            for path, _, new in diffs:
                _set(data, path, new)
            applied = [describe(d) for d in diffs]
        else:
            file_differs = [describe(d) for d in harmful]
        data = _restore(data, current.resolved_dict(), ())
    else:
        _no_secrets(stored, resolved_path,
                    unreadable or (f"the run's plan file is gone ({original})" if original
                                                          else "the run names no plan file"))
    plan = _validate(Plan, data, resolved_path)
    plan._source_path = source if source is not None else (Path(original) if original else None)
    return ResumePlan(plan, applied, file_differs)


def harmless(path: tuple) -> bool:
    text = render(path)
    return any(r.match(text) for r in _HARMLESS_RE)


def differences(a: object, b: object, path: tuple = ()) -> list[Diff]:
    """(path, value in a, value in b) for every leaf that differs; lists of named mappings pair by name."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[Diff] = []
        for k in list(a) + [k for k in b if k not in a]:
            out += differences(a.get(k, _MISSING), b.get(k, _MISSING), (*path, k))
        return out
    ka, kb = _keyed(a), _keyed(b)
    if ka is not None and kb is not None:
        out = []
        for k in list(ka) + [k for k in kb if k not in ka]:
            out += differences(ka.get(k, _MISSING), kb.get(k, _MISSING), (*path, k))
        return out
    return [] if a == b else [(path, a, b)]


def render(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part[1]}]" if isinstance(part, tuple) else (f".{part}" if text else str(part))
    return text


def describe(diff: Diff) -> str:
    path, old, new = diff
    return f"{render(path)}: {_show(old)} -> {_show(new)}"


def refusal(run_dir: Path, harmful: list[Diff]) -> str:
    lines = [describe(d) for d in harmful[:SHOWN]]
    if len(harmful) > SHOWN:
        lines.append(f"... and {len(harmful) - SHOWN} more")
    return (f"differs from the plan {run_dir / RESOLVED} was measured with, in {len(harmful)} "
            f"field{'s' if len(harmful) != 1 else ''} that change what is measured; resume without a plan to "
            "finish the run as it started, or start a new run with this plan. Only "
            f"{', '.join(HARMLESS)} may change on a resume:\n  " + "\n  ".join(lines))


# ---- helpers ----------------------------------------------------------------------------------------------


def _keyed(value: object) -> dict | None:
    """A list of mappings that all carry a distinct name (variants, suites) or id (prompts), by that key."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return None
    for key in ("name", "id"):
        names = [v.get(key) for v in value]
        if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
            return {(key, n): v for n, v in zip(names, value, strict=True)}
    return None


def _child(node: object, part: object) -> object:
    if isinstance(part, tuple):
        keyed = _keyed(node)
        return keyed.get(part, _MISSING) if keyed is not None else _MISSING
    return node.get(part, _MISSING) if isinstance(node, dict) else _MISSING


def _set(data: object, path: tuple, value: object) -> None:
    node = data
    for part in path[:-1]:
        node = _child(node, part)
        if node is _MISSING:
            return
    last = path[-1]
    if isinstance(node, dict) and not isinstance(last, tuple):
        if value is _MISSING:
            node.pop(last, None)
        else:
            node[last] = value


def _restore(stored: object, current: object, path: tuple) -> object:
    """Redacted values of the stored plan, taken from the plan file at the same place."""
    if stored == REDACTED:
        if current is _MISSING or current == REDACTED:
            raise InputError(RESOLVED, None, render(path),
                             "is redacted in the run directory and the plan file "
                             "has no value here: pass the plan that holds it with --plan")
        return current
    if isinstance(stored, dict):
        return {k: _restore(v, current.get(k, _MISSING) if isinstance(current, dict) else _MISSING,
                            (*path, k))
                for k, v in stored.items()}
    if isinstance(stored, list):
        keyed = _keyed(stored)
        if keyed is not None:
            cur = _keyed(current) or {}
            return [_restore(v, cur.get(k, _MISSING), (*path, k)) for k, v in keyed.items()]
        cur_list = current if isinstance(current, list) and len(current) == len(stored) else None
        return [_restore(v, cur_list[i] if cur_list else _MISSING, (*path, i)) for i, v in enumerate(stored)]
    return stored


def _no_secrets(stored: object, resolved_path: Path, why: str, path: tuple = ()) -> None:
    """Without a readable plan file, a redacted value cannot be restored: refuse rather than pass it on."""
    if stored == REDACTED:
        raise InputError(str(resolved_path), None, render(path),
                         f"is redacted and {why}: pass the plan that holds it with --plan")
    if isinstance(stored, dict):
        for k, v in stored.items():
            _no_secrets(v, resolved_path, why, (*path, k))
    elif isinstance(stored, list):
        for i, v in enumerate(stored):
            _no_secrets(v, resolved_path, why, (*path, i))


def _show(value: object) -> str:
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_json(path: Path, where: Path, message: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InputError(str(where), None, None, message) from None
    if not isinstance(data, dict):
        raise InputError(str(where), None, None, message)
    return data


def _load(path: Path, run_dir: Path, read: PlanReader) -> Plan:
    if not path.is_file():
        raise InputError(str(path), None, None, "plan file not found")
    return read(path, run_dir.parent)  # the demo's checkpoints sit next to its runs


def _validate(model: type[Plan], data: object, path: Path) -> Plan:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(str(path), None, ".".join(str(p) for p in err["loc"]), err["msg"]) from None


def _legacy_plan(run_dir: Path, prov: dict, plan_path: str | Path | None, read: PlanReader) -> Plan:
    plan_file = str(plan_path or prov.get("plan_file") or "")
    if not Path(plan_file).is_file():
        raise InputError(str(run_dir / "provenance.json"), None, "plan_file",
                         f"the run's plan file is gone: {plan_file}")
    plan = _load(Path(plan_file), run_dir, read)
    if prov.get("target_workdir"):
        plan.target.workdir = prov["target_workdir"]
    return plan
