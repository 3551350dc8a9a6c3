"""Facts gathered on the target for the preflight checks: config.json files, safetensors headers (only
their first 8+N bytes travel), paths, disk, port, GPUs. Every command is an argv list; values travel as
one JSON argument to a `python -c` snippet, never through a shell string."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.checks.checkpoint import DrafterFacts
from harness.common.safetensors_io import SafetensorsError, TensorInfo, header_length, parse_header

if TYPE_CHECKING:
    from harness.targets.base import Target

MAX_CONFIG_BYTES = 4 << 20
INDEX_FILE = "model.safetensors.index.json"
SHARD_LIMIT = 64  # drafters have one file; stop before walking a whole target checkpoint

# Paths exist? config.json in them? free disk under the work directory? port free? (stdlib only)
ENV_SNIPPET = r"""
import json, os, shutil, socket, sys
req = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "paths": {}}
for p in req["paths"]:
    q = os.path.expanduser(p)
    out["paths"][p] = {"exists": os.path.exists(q), "config": os.path.isfile(os.path.join(q, "config.json"))}
wd = os.path.abspath(os.path.expanduser(req["workdir"]))
out["workdir"] = wd
out["workdir_exists"] = os.path.isdir(wd)
probe = wd
while not os.path.exists(probe) and os.path.dirname(probe) != probe:
    probe = os.path.dirname(probe)
try:
    usage = shutil.disk_usage(probe)
    out["disk"] = {"path": probe, "free": usage.free, "total": usage.total}
except OSError as e:
    out["disk_error"] = str(e)
if req.get("port"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((req["host"], int(req["port"])))
        out["port_free"] = True
    except OSError as e:
        out["port_free"] = False
        out["port_error"] = str(e)
    finally:
        s.close()
print(json.dumps(out))
"""

NVIDIA_SMI = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,memory.free",
    "--format=csv,noheader,nounits",
]


@dataclass
class EnvFacts:
    python_ok: bool = False
    python_error: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # ENV_SNIPPET's answer


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_mib: float
    free_mib: float


def target_path(path: str, workdir: str) -> str:
    """Where a plan path lives on the target: relative paths are under the work directory."""
    if path.startswith(("/", "~")):
        return path
    return f"{workdir.rstrip('/')}/{path}"


async def read_json(target: Target, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed JSON object, None) or (None, why not)."""
    try:
        data = await target.read_file(path, max_bytes=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except Exception as exc:  # a dropped link or a permission problem: report it, keep checking the rest
        return None, f"cannot read {path}: {exc}"
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path} is not valid JSON: {exc}"
    if not isinstance(obj, dict):
        return None, f"{path} is not a JSON object"
    return obj, None


async def read_header(target: Target, path: str) -> dict[str, TensorInfo]:
    """One safetensors file's tensor table; reads 8 bytes, then the 8+N header bytes, nothing more."""
    n = header_length(await target.read_file(path, max_bytes=8))
    return parse_header(await target.read_file(path, max_bytes=8 + n))[0]


async def _weight_files(target: Target, directory: str) -> list[str]:
    index, _ = await read_json(target, f"{directory}/{INDEX_FILE}")
    if index and isinstance(index.get("weight_map"), dict):
        return sorted(set(map(str, index["weight_map"].values())))[:SHARD_LIMIT]
    res = await target.run(["find", "-H", directory, "-maxdepth", "1", "-name", "*.safetensors"], timeout=60)
    names = sorted(line.rsplit("/", 1)[-1] for line in res.stdout.splitlines() if line.strip())
    return names[:SHARD_LIMIT]


async def read_drafter(target: Target, directory: str) -> DrafterFacts:
    """config.json and the merged tensor table of every safetensors file of a drafter directory."""
    cfg, problem = await read_json(target, f"{directory}/config.json")
    if cfg is None:
        return DrafterFacts(directory, problem=problem)
    try:
        files = await _weight_files(target, await _home(target, directory))  # `find` needs ~ expanded
    except Exception as exc:
        return DrafterFacts(directory, cfg, problem=f"cannot list {directory}: {exc}")
    if not files:
        return DrafterFacts(directory, cfg, problem=f"no *.safetensors file in {directory}")
    tensors: dict[str, TensorInfo] = {}
    for name in files:
        try:
            tensors.update(await read_header(target, f"{directory}/{name}"))
        except (SafetensorsError, FileNotFoundError) as exc:
            return DrafterFacts(directory, cfg, problem=f"{directory}/{name}: {exc}")
        except Exception as exc:
            return DrafterFacts(directory, cfg, problem=f"cannot read {directory}/{name}: {exc}")
    return DrafterFacts(directory, cfg, tensors)


async def _home(target: Target, directory: str) -> str:
    """`find` gets its directory as an argv item, so expand a leading ~ with the target's $HOME first."""
    if not (directory == "~" or directory.startswith("~/")):
        return directory
    res = await target.run(["sh", "-c", 'printf %s "$HOME"'], timeout=30)
    home = res.stdout.strip()
    return home + directory[1:] if res.rc == 0 and home else directory


async def gather_env(
    target: Target,
    python: str,
    paths: list[str],
    workdir: str,
    host: str,
    port: int | None,
    env: dict[str, str] | None = None,
) -> EnvFacts:
    """Run ENV_SNIPPET with the server's environment (its python may need e.g. LD_LIBRARY_PATH)."""
    req = json.dumps({"paths": paths, "workdir": workdir, "host": host, "port": port})
    try:
        res = await target.run([python, "-c", ENV_SNIPPET, req], timeout=60, env=env or None)
    except Exception as exc:
        return EnvFacts(False, f"{exc}")
    if res.rc != 0:
        return EnvFacts(False, (res.stderr or res.stdout).strip()[-500:] or f"exit status {res.rc}")
    try:
        return EnvFacts(True, "", json.loads(res.stdout.strip().splitlines()[-1]))
    except (json.JSONDecodeError, IndexError):
        return EnvFacts(False, f"unexpected output: {res.stdout.strip()[-300:]!r}")


async def gather_gpus(target: Target, env: dict[str, str] | None = None) -> tuple[list[Gpu] | None, str]:
    """GPUs as nvidia-smi lists them (run with the server's environment), or (None, why not)."""
    try:
        res = await target.run(NVIDIA_SMI, timeout=60, env=env or None)
    except Exception as exc:
        return None, str(exc)
    if res.rc != 0:
        return None, (res.stderr or res.stdout).strip()[-300:] or f"nvidia-smi exit status {res.rc}"
    return parse_nvidia_smi(res.stdout), ""


def parse_nvidia_smi(text: str) -> list[Gpu]:
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            gpus.append(Gpu(int(parts[0]), parts[1], float(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return gpus
