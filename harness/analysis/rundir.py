"""The run directory: its name, its files and their columns."""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

from harness.analysis.store import append_jsonl, write_json  # noqa: F401  (the run directory's writers)
from harness.common.errors import InputError
from harness.engines import phase_columns

PHASE_COLUMNS = ["variant", "phase", "suite", "concurrency", "repeat", "requests", "errors",
                 "output_tokens", "wall_s", "server_accept_len", "flush_ok", "last_gen_throughput",
                 *phase_columns(), "passes"]
WINDOW_COLUMNS = ["line", "time", "kind", "running_req", "queue_req", "token_usage", "accept_len",
                  "accept_rate", "cuda_graph", "gen_throughput", "input_throughput"]
SERVER_WINDOW_COLUMNS = ["variant", "phase", *WINDOW_COLUMNS]
REDACTED = "<redacted>"
# Name parts that mark a secret: OPENAI_API_KEY, HF_TOKEN, --api-key (not TOKENIZERS_PARALLELISM,
# --ssl-keyfile).
_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                           "CREDENTIALS"})
_MIN_SECRET_LEN = 4  # shorter values would redact ordinary text


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def new_run_dir(results_dir: str | Path, plan_name: str) -> tuple[str, Path]:
    """results/<timestamp>-<plan>[-N]; created exclusively so two runs never share a directory."""
    base = Path(results_dir)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{_slug(plan_name)}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(1000):
            run_id = stem if n == 0 else f"{stem}-{n}"
            path = base / run_id
            try:
                path.mkdir()
            except FileExistsError:
                continue
            (path / "logs").mkdir()
            return run_id, path
    except (PermissionError, NotADirectoryError, FileExistsError, OSError) as exc:
        where = exc.filename or base
        raise InputError(str(base), None, "--results-dir",
                         f"cannot create a run directory ({where}: {exc.strerror or exc})") from None
    raise RuntimeError(f"could not create a run directory under {base}")


# ---- secrets: what lands in the run directory is shared; values of secret-looking names never do ----------


def is_secret_name(name: str) -> bool:
    """True for env names and flags such as OPENAI_API_KEY, HF_TOKEN, --api-key, --admin-api-key."""
    return any(part in _SECRET_PARTS for part in re.split(r"[^A-Za-z0-9]+", name.upper()))


def redact_env(env: dict[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if is_secret_name(str(k)) else v) for k, v in env.items()}


def redact_argv(argv: list[Any]) -> list[Any]:
    """The value after a secret-looking flag (`--api-key X`, `--api-key=X`) becomes <redacted>."""
    out: list[Any] = []
    hide_next = False
    for item in argv:
        text = str(item)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif text.startswith("-") and "=" in text and is_secret_name(text.split("=", 1)[0]):
            out.append(text.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(item)
            hide_next = text.startswith("-") and is_secret_name(text)
    return out


def redact_plan(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved plan dict with secret env values and secret flag values redacted (a deep copy)."""
    data = json.loads(json.dumps(data, default=str))
    target = data.get("target") or {}
    if isinstance(target.get("env"), dict):
        target["env"] = redact_env(target["env"])
    if isinstance(target.get("launcher"), list):  # a plan.resolved.json from before the engines' own options
        target["launcher"] = redact_argv(target["launcher"])
    for options in (target.get("sglang"), target.get("vllm")):  # each engine's launcher (target.<engine>)
        if isinstance(options, dict) and isinstance(options.get("launcher"), list):
            options["launcher"] = redact_argv(options["launcher"])
    for holder in [data.get("model") or {}, *(data.get("variants") or [])]:
        if isinstance(holder, dict) and isinstance(holder.get("extra_args"), list):
            holder["extra_args"] = redact_argv(holder["extra_args"])
    return data


def secret_values(env: dict[str, Any] | None, argv: list[Any] | None = None) -> list[str]:
    """The secret values themselves (longest first), to scrub from server logs copied into the run."""
    found = {str(v) for k, v in (env or {}).items() if is_secret_name(str(k))}
    for item, shown in zip(argv or [], redact_argv(list(argv or [])), strict=True):
        if item != shown:  # `--flag=value` hides after the "=", a separate value hides whole
            found.add(str(item).split("=", 1)[1] if str(shown).endswith("=" + REDACTED) else str(item))
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def scrub(data: bytes, secrets: list[str]) -> bytes:
    for value in secrets:
        data = data.replace(value.encode("utf-8"), REDACTED.encode())
    return data


def leftover_servers(path: Path) -> list[dict[str, Any]]:
    """Entries of servers.jsonl whose process group was started but never stopped or kept."""
    if not path.exists():
        return []
    last: dict[int, dict[str, Any]] = {}
    started: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # blank, or cut by a kill mid-write (append_jsonl keeps the next entry whole)
        if isinstance(entry, dict) and isinstance(entry.get("pgid"), int):
            last[entry["pgid"]] = entry
            if entry.get("state") == "started":
                started[entry["pgid"]] = entry
    return [started[p] for p, e in last.items() if p in started and e.get("state") == "started"]


def mark_incomplete(run_dir: str | Path) -> None:
    """provenance.json's status "incomplete" where the summary (which sets it) could not be written."""
    path = Path(run_dir) / "provenance.json"
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("status") == "running":
            write_json(path, {**data, "status": "incomplete"})
