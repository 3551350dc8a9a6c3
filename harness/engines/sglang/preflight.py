"""SGLang's part of the preflight: each variant's argv judged by the target's own SGLang parser (or the
stand-in's copy of it), and the flag rules of REFERENCE §5 (`flags.py`). Starts no server."""

from __future__ import annotations

from typing import Any

from harness.common.findings import PLAN_WIDE, Finding, error, info, warning
from harness.engines.sglang import flags as fl
from harness.engines.sglang import parser_probe as pp
from harness.engines.sglang.launch import build_launch_argv, launcher_argv

STAND_IN_VERSION = "0.5.15.post1"  # the SGLang version the stand-in (harness.sim) reproduces
PLACEHOLDER_PORT = 30000  # argv needs a port; with `port: auto` the real one is picked at start


async def ask_parser(
    plan: Any, target: Any, env: Any, arch: str | None, sglang_version: str | None
) -> tuple[dict[str, list[str]], dict[str, Any], str | None, list[Finding]]:
    """Build each variant's argv for the version the runner will use, and let the target's SGLang (or
    the stand-in's copy of its parser) judge them. Returns (argvs, parser answers, version, findings)."""
    t = plan.target
    simulated, python, workdir = bool(t.simulated), str(t.python), str(t.workdir)
    env_vars = {str(k): str(v) for k, v in (t.env or {}).items()}
    pinned = sglang_version or (t.sglang_version if t.sglang_version not in (None, "auto") else None)
    sim_version = STAND_IN_VERSION if simulated else None
    detected = None
    if env.python_ok and not simulated and pinned is None:  # the argv spelling depends on the version
        first = await run_probe(target, python, {}, False, None, env, env_vars, workdir)
        detected = first.get("version") if first.get("importable") else None
    argvs, findings = build_argvs(plan, sim_version or pinned or detected)
    probe: dict[str, Any] = {}
    if env.python_ok:
        probe = await run_probe(target, python, argvs, simulated, arch, env, env_vars, workdir)
        findings += sglang_findings(python, probe, pinned, simulated)
    importable = bool(probe.get("importable"))
    version = sim_version or (probe.get("version") if importable else None) or detected or pinned
    parsed = probe.get("variants") or {}
    if importable and not parsed and argvs:
        findings.append(
            warning(
                PLAN_WIDE,
                "sglang-probe",
                "SGLang's parser answered nothing",
                "the checks fell back to draftbench's facts tables",
                "",
            )
        )
    if version is None:
        findings.append(
            warning(
                PLAN_WIDE,
                "sglang-version-unknown",
                "SGLang version unknown",
                "version-specific checks (renamed flags, known bugs) were skipped",
                "make SGLang importable by target.python, or set target.sglang_version",
            )
        )
    return argvs, parsed, version, findings


def launch_findings(plan: Any, v: Any, argv: list[str], base_argv: list[str] | None, parsed: Any,
                    version: str | None, arch: str | None, max_batch: int) -> list[Finding]:
    """Flag spelling and values of one variant's argv: the parser's answer when there is one, else the
    facts tables; speculative parameters and CUDA graphs always."""
    out: list[Finding] = []
    if parsed is not None:
        out += pp.interpret(v.name, parsed, version, max_batch)
    else:  # the facts tables stand in for a parser that could not be asked
        out += fl.check_flag_versions(v.name, argv, version, v.spec_algorithm)
    out += fl.check_spec_params(v, argv, version, arch, tables=parsed is None)
    out += fl.check_cuda_graphs(v, argv, base_argv, max_batch, None if parsed else plan.server.cuda_graph_max_bs)
    return out


def drafter_findings(variant: str, argv: list[str], aux_ids: list[Any] | None, target_layers: int | None,
                     version: str | None) -> list[Finding]:
    """Version bugs that depend on the drafter's aux layer ids (EAGLE-3 only)."""
    return fl.check_aux_capture_bug(variant, aux_ids, target_layers, version, fl.graphs_disabled(argv) is None)


def build_argvs(plan: Any, version: str | None) -> tuple[dict[str, list[str]], list[Finding]]:
    """Each variant's launch_server arguments (launcher stripped), as the runner would build them."""
    skip = len(launcher_argv(plan.target))
    port = plan.server.port if isinstance(plan.server.port, int) else PLACEHOLDER_PORT
    out: dict[str, list[str]] = {}
    problems = []
    for v in plan.variants:
        if getattr(v, "engine", None) not in (None, "sglang"):
            continue  # another engine's arm: its own engine builds it
        try:
            out[v.name] = build_launch_argv(plan, v, port, version)[skip:]
        except Exception as exc:  # a plan the launcher cannot express: say so instead of crashing the check
            problems.append(
                error(
                    v.name,
                    "argv",
                    "cannot build the launch command",
                    str(exc),
                    "check the variant's settings",
                )
            )
    return out, problems


async def run_probe(
    target: Any,
    python: str,
    argvs: dict[str, list[str]],
    simulated: bool,
    arch: str | None,
    env: Any,
    env_vars: dict[str, str],
    workdir: str,
) -> dict[str, Any]:
    """Run PROBE_SNIPPET on the target (in the work directory, where relative paths resolve)."""
    req = pp.probe_request(argvs, sim=simulated, target_arch=arch)
    cwd = workdir if env.data.get("workdir_exists") else None
    try:
        res = await target.run(
            [python, "-c", pp.PROBE_SNIPPET, req], timeout=pp.PROBE_TIMEOUT_S, env=env_vars or None, cwd=cwd
        )
    except Exception as exc:
        return {"importable": False, "error": f"probe did not finish: {exc}"}
    data = pp.parse_output(res.stdout)
    if data is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        return {"importable": False, "error": " | ".join(tail) or f"exit status {res.rc}"}
    return data


def sglang_findings(python: str, probe: dict[str, Any], pinned: str | None, simulated: bool) -> list[Finding]:
    """What the probe said about SGLang (or, on a simulated target, about draftbench's stand-in)."""
    if simulated:
        if not probe.get("importable"):
            return [
                error(
                    PLAN_WIDE,
                    "stand-in-missing",
                    f"draftbench's stand-in is not importable by '{python}'",
                    str(probe.get("error") or "import failed"),
                    "install draftbench for that interpreter, or set target.python to one that has it",
                )
            ]
        return [
            info(
                PLAN_WIDE,
                "simulated",
                f"simulated target: draftbench's stand-in of SGLang {probe.get('version')}",
                "no GPU or SGLang needed; flags are judged by the stand-in's copy of SGLang's parser",
            )
        ]
    if not probe.get("importable"):
        return [
            error(
                PLAN_WIDE,
                "sglang-missing",
                f"SGLang is not importable by '{python}'",
                str(probe.get("error") or "import failed"),
                "set target.python to the interpreter that has sglang installed (e.g. a venv's bin/python)",
            )
        ]
    version = probe.get("version")
    out = [info(PLAN_WIDE, "sglang-version", f"SGLang {version} importable by '{python}'")]
    if pinned and version and pinned != version:
        out.append(
            warning(
                PLAN_WIDE,
                "sglang-version-mismatch",
                f"the plan pins sglang_version {pinned}, the target has {version}",
                "flag spellings are chosen for the pinned version",
                "set target.sglang_version: auto (or the installed version)",
            )
        )
    return out
