"""SGLang's part of the preflight: each variant's argv judged by the target's own SGLang parser (or the
stand-in's copy of it), and the flag rules of REFERENCE §5 (`flags.py`). Starts no server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.common.findings import PLAN_WIDE, Finding, error, info, warning
from harness.common.versions import version_lt
from harness.engines.base import DrafterCheck, LaunchCheck, ParserAnswer, PreflightInput
from harness.engines.sglang import flags as fl
from harness.engines.sglang import parser_probe as pp
from harness.engines.sglang.launch import build_launch_argv, launcher_argv

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.targets.base import Target

STAND_IN_VERSION = "0.5.15.post1"  # the SGLang version the stand-in (harness.sim) reproduces
PLACEHOLDER_PORT = 30000  # argv needs a port; with `port: auto` the real one is picked at start
MULTI_LAYER_SINCE = "0.5.12"  # EAGLE-3 heads of several layers, or not 3 aux layers, load from here


async def ask_parser(pre: PreflightInput) -> ParserAnswer:
    """Build each variant's argv for the version the runner will use, and let the target's SGLang (or
    the stand-in's copy of its parser) judge them."""
    plan, target, t = pre.plan, pre.target, pre.plan.target
    simulated, python, workdir = t.simulated, t.python, t.workdir
    env_vars = {str(k): str(v) for k, v in t.env.items()}
    pinned = pre.version or t.sglang.pinned
    sim_version = STAND_IN_VERSION if simulated else None
    detected = None
    if pre.python_ok and not simulated and pinned is None:  # the argv spelling depends on the version
        first = await run_probe(target, python, {}, False, None, pre.workdir_exists, env_vars, workdir)
        detected = first.get("version") if first.get("importable") else None
    argvs, findings = build_argvs(plan, sim_version or pinned or detected)
    probe: dict[str, Any] = {}
    if pre.python_ok:
        probe = await run_probe(target, python, argvs, simulated, pre.arch, pre.workdir_exists, env_vars,
                                workdir)
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
                "make SGLang importable by target.python, or set target.sglang.version",
            )
        )
    return ParserAnswer(argvs, parsed, version, findings)


def launch_findings(check: LaunchCheck) -> list[Finding]:
    """Flag spelling and values of one variant's argv: the parser's answer when there is one, else the
    facts tables; speculative parameters and CUDA graphs always."""
    v, argv, parsed, version = check.variant, check.argv, check.parsed, check.version
    out: list[Finding] = []
    if parsed is not None:
        out += pp.interpret(v.name, parsed, version, check.max_batch)
    else:  # the facts tables stand in for a parser that could not be asked
        out += fl.check_flag_versions(v.name, argv, version, v.spec_algorithm)
    out += fl.check_spec_params(v, argv, version, check.arch, tables=parsed is None)
    cap = None if parsed else fl.graph_max_bs(argv, check.plan.server.cuda_graph_max_bs)  # the parser's own
    out += fl.check_cuda_graphs(v, argv, check.base_argv, check.max_batch, cap)
    return out


def checkpoint_findings(check: DrafterCheck) -> list[Finding]:
    """SGLang's rules on an EAGLE-3 head's checkpoint: it needs draft_vocab_size in the config (vLLM fills
    it from vocab_size); before 0.5.12 a head has one layer and reads three aux layers (the shape checks every
    engine shares run in harness.checks.checkpoint)."""
    out: list[Finding] = []
    if check.config is not None and check.config.get("draft_vocab_size") is None:
        out.append(
            error(
                check.variant,
                "draft-vocab-missing",
                "config.json has no draft_vocab_size",
                "SGLang ≤ 0.5.1 requires it, and 0.5.15.post1 dies at start-up with "
                "AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size'",
                'add "draft_vocab_size" (the lm_head rows) to the drafter\'s config.json',
            )
        )
    ids, version = check.aux_ids, check.version
    ints = ids is not None and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    if ints and check.target_layers and len(ids or ()) != 3 and version_lt(version, MULTI_LAYER_SINCE):
        out.append(
            error(
                check.variant,
                "aux-layer-count",
                f"{len(ids)} aux layer ids; SGLang before {MULTI_LAYER_SINCE} uses 3",
                "the fc input width is fixed at 3 × hidden size there",
                f"use SGLang ≥ {MULTI_LAYER_SINCE} or a three-layer drafter",
            )
        )
    if ids is not None and check.target_layers:  # SGLang's convention; vLLM's: its drafter_findings
        out += _aux_ids(check.variant, list(ids), check.target_layers)
    layers = (check.config or {}).get("num_hidden_layers", 1)
    if layers != 1 and version_lt(version, MULTI_LAYER_SINCE):
        out.append(
            error(
                check.variant,
                "draft-layers",
                f"the drafter has {layers} layers",
                f"SGLang {version} raises ValueError('EAGLE3 currently only supports 1 layer'); "
                f"multi-layer drafters load from {MULTI_LAYER_SINCE}",
                f"use a one-layer drafter or SGLang ≥ {MULTI_LAYER_SINCE}",
            )
        )
    return out


def _aux_ids(variant: str, ids: list[Any], L: int) -> list[Finding]:
    """eagle_aux_hidden_state_layer_ids as SGLang reads them: integers, id k capturing the input of layer
    k + 1, so 0..L-2 (REFERENCE §6.3)."""
    out = []
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return [
            error(
                variant,
                "aux-layer-ids",
                f"eagle_aux_hidden_state_layer_ids {ids} are not all integers",
                "SGLang ignores the config and falls back to its default layers",
                "write the ids as a list of integers",
            )
        ]
    bad = [i for i in ids if i < 0 or i + 1 > L - 1]
    if bad:
        out.append(
            error(
                variant,
                "aux-layer-range",
                f"aux layer ids {bad} fall outside the target's {L} layers (usable 0..{L - 2})",
                "SGLang captures the input of layer id+1; the drafter was trained on a deeper target",
                "use a drafter trained for this target",
            )
        )
    return out

def drafter_findings(check: DrafterCheck) -> list[Finding]:
    """Version bugs that depend on the drafter's aux layer ids (EAGLE-3 only)."""
    return fl.check_aux_capture_bug(check.variant, check.aux_ids, check.target_layers, check.version,
                                    fl.graphs_disabled(check.argv) is None)


def build_argvs(plan: Plan, version: str | None) -> tuple[dict[str, list[str]], list[Finding]]:
    """Each variant's launch_server arguments (launcher stripped), as the runner would build them."""
    skip = len(launcher_argv(plan.target))
    port = plan.server.port if isinstance(plan.server.port, int) else PLACEHOLDER_PORT
    out: dict[str, list[str]] = {}
    problems = []
    for v in plan.variants:
        if v.engine not in (None, "sglang"):
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
    target: Target,
    python: str,
    argvs: dict[str, list[str]],
    simulated: bool,
    arch: str | None,
    workdir_exists: bool,
    env_vars: dict[str, str],
    workdir: str,
) -> dict[str, Any]:
    """Run PROBE_SNIPPET on the target (in the work directory, where relative paths resolve)."""
    req = pp.probe_request(argvs, sim=simulated, target_arch=arch)
    cwd = workdir if workdir_exists else None
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
                f"the plan pins SGLang {pinned}, the target has {version}",
                "flag spellings are chosen for the pinned version",
                "set target.sglang.version: auto (or the installed version)",
            )
        )
    return out
