"""vLLM's part of the preflight: each vLLM variant's `vllm serve` argv, built for the version the runner
will use, and vLLM's rules for it (method vs algorithm, chain drafting, aux layer ids against the target's
depth). The checkpoint checks every engine shares (algorithm vs checkpoint, draft/target shapes from the
safetensors headers, draft context vs the suite) run in harness.checks. Starts no server."""

from __future__ import annotations

import json
from typing import Any

from harness.common.findings import PLAN_WIDE, Finding, error, info, warning
from harness.common.versions import version_lt
from harness.engines.base import DrafterCheck, LaunchCheck, ParserAnswer, PreflightInput
from harness.engines.vllm import serve_check
from harness.engines.vllm.launch import (
    CAPTURE_SIZE_SINCE,
    METHODS,
    PER_REQUEST_SINCE,
    build_launch_argv,
    launcher_argv,
)

STAND_IN_VERSION = "0.33.0"  # the vLLM release whose formats the stand-in (harness.sim.vllm) speaks
PLACEHOLDER_PORT = 8000


async def ask_parser(pre: PreflightInput) -> ParserAnswer:
    """vLLM's argv of every vLLM variant (launcher stripped), judged by the parser of that release as
    captured from its source (serve_args.py) or, on a simulated target, by the stand-in's; vLLM's own argparse
    is not run on the target (it needs vLLM's whole import: torch, CUDA)."""
    plan, t = pre.plan, pre.plan.target
    findings: list[Finding] = []
    version = (t.vllm.pinned or STAND_IN_VERSION) if t.simulated else (pre.version or t.vllm.pinned)
    if version is None and pre.python_ok:
        res = await pre.target.run([t.python, "-c", "import vllm; print(vllm.__version__)"], timeout=120)
        version = res.stdout.strip().splitlines()[-1] if res.rc == 0 and res.stdout.strip() else None
        if version is None:
            findings.append(error(PLAN_WIDE, "vllm-missing", f"vLLM is not importable by '{t.python}'",
                                  (res.stderr or res.stdout).strip()[-300:],
                                  "install vLLM for target.python, or set target.vllm.launcher and "
                                  "target.vllm.version"))
    if version is None:
        findings.append(warning(PLAN_WIDE, "vllm-version-unknown", "vLLM version unknown",
                                "the argv is built for the newest formats draftbench knows",
                                "set target.vllm.version"))
    skip = len(launcher_argv(t))
    port = plan.server.port if isinstance(plan.server.port, int) else PLACEHOLDER_PORT
    argvs: dict[str, list[str]] = {}
    for v in plan.variants:
        if v.engine != "vllm":
            continue
        try:
            argvs[v.name] = build_launch_argv(plan, v, port, version)[skip:]
        except Exception as exc:
            findings.append(error(v.name, "argv", "cannot build the vllm serve command", str(exc),
                                  "check the variant's algorithm and settings"))
    parsed: dict[str, dict[str, Any]] = {}
    for name, argv in argvs.items():
        answer = serve_check.judge(argv, version, simulated=bool(t.simulated))
        if answer is not None:
            parsed[name] = answer
    if argvs and not parsed and version is not None:
        findings += serve_check.interpret(PLAN_WIDE, None, version)
    return ParserAnswer(argvs, parsed, version, findings)


def spec_config(argv: list[str]) -> dict[str, Any] | None:
    if "--speculative-config" not in argv:
        return None
    try:
        cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    except (IndexError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def launch_findings(check: LaunchCheck) -> list[Finding]:
    """vLLM's rules for one variant: what it does not pass, its method, chain drafting, per-request stats."""
    plan, variant, version = check.plan, check.variant, check.version
    out: list[Finding] = []
    name = variant.name
    if check.parsed is not None:
        out += serve_check.interpret(name, check.parsed, version)
    if plan.model.extra_args:
        out.append(info(name, "vllm-model-extra-args", "model.extra_args are not passed to vllm serve",
                        "they are SGLang launch_server flags", "put vLLM flags in the variant's extra_args"))
    if plan.server.cuda_graph_max_bs is not None and version_lt(version, CAPTURE_SIZE_SINCE):
        out.append(warning(name, "vllm-capture-size", "server.cuda_graph_max_bs is not passed",
                           f"--max-cudagraph-capture-size is verified from vLLM {CAPTURE_SIZE_SINCE} on", ""))
    if not variant.spec_algorithm:
        return out
    if str(variant.spec_algorithm).upper() not in METHODS:
        out.append(error(name, "vllm-method", f"vLLM has no method for {variant.spec_algorithm}",
                         f"known: {', '.join(METHODS)}", "pick another algorithm for this arm"))
    if variant.eagle_topk is not None and int(variant.eagle_topk) > 1:
        out.append(error(name, "vllm-chain-only", f"eagle_topk {variant.eagle_topk} on vLLM",
                         "vLLM's EAGLE proposer drafts one chain of num_speculative_tokens (= num_steps)",
                         "set eagle_topk: 1 and num_draft_tokens: num_steps + 1"))
    if variant.num_steps is None:
        out.append(warning(name, "vllm-k-missing", "num_speculative_tokens not set",
                           "vLLM then takes it from the draft's config or refuses to start",
                           "set num_steps (K), eagle_topk: 1, num_draft_tokens: K + 1"))
    if version_lt(version, PER_REQUEST_SINCE):
        out.append(info(name, "vllm-no-per-request", "no per-request spec stats",
                        f"--per-request-spec-decode-metrics exists from vLLM {PER_REQUEST_SINCE}; accept "
                        "length comes from /metrics counter deltas and the log", ""))
    return out


def vllm_default_layers(L: int) -> list[int]:
    """vLLM's fallback capture layers for a Llama-family target
    (get_eagle3_default_aux_hidden_state_layers)."""
    return [2, L // 2, L - 3]


def configured_aux_layers(config: dict[str, Any] | None) -> tuple[list[Any], str] | None:
    """The aux layers vLLM takes from the head's config, in its convention (input of layer k), and the key it
    found them under; None: it falls back to the target's default. As get_eagle3_aux_layers_from_config reads
    them (0.26.0): a non-empty top-level `eagle_aux_hidden_state_layer_ids` as it is, else DFlash's
    `dflash_config.target_layer_ids`, DSpark's `dspark_target_layer_ids`, then `target_layer_ids`, each + 1
    (outputs of layer k); never the nested `eagle_config` ids."""
    cfg = config or {}
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if top:
        ids = list(top) if isinstance(top, list | tuple) else [top]
        return ids, "eagle_aux_hidden_state_layer_ids"
    dflash = cfg.get("dflash_config")
    others = (("dflash_config.target_layer_ids",
               dflash.get("target_layer_ids") if isinstance(dflash, dict) else None),
              ("dspark_target_layer_ids", cfg.get("dspark_target_layer_ids")),
              ("target_layer_ids", cfg.get("target_layer_ids")))
    for key, ids in others:
        if ids and isinstance(ids, list | tuple) and all(type(i) is int for i in ids):
            return [i + 1 for i in ids], key
    return None


def drafter_findings(check: DrafterCheck) -> list[Finding]:
    """EAGLE-3 aux layers as vLLM reads them (0.22.1 .. 0.33.0,
    v1/worker/gpu/spec_decode/eagle/eagle3_utils.py): only the head config's top-level
    `eagle_aux_hidden_state_layer_ids`, id k capturing the hidden state that
    enters decoder layer k (the output of layer k - 1). Without it vLLM captures the target's default layers
    (2, L // 2, L - 3) and says so in one INFO line (vllm-project/vllm#50170). The SpecForge / SGLang layout
    keeps the ids under `eagle_config` (`aux_ids` here), in SGLang's convention (id k = output of layer k):
    vLLM uses that key only to size fc, never to choose the layers."""
    variant, aux_ids = check.variant, check.aux_ids
    cfg = spec_config(check.argv) or {}
    if cfg.get("method") != "eagle3":
        return []
    L = check.target_layers
    found = configured_aux_layers(check.config)
    top = found[0] if found else None
    nested = list(aux_ids) if aux_ids else None
    out: list[Finding] = []
    ints = lambda ids: all(isinstance(i, int) and not isinstance(i, bool) for i in ids)  # noqa: E731
    if top is None:
        default = vllm_default_layers(L) if L else None
        where = f"{default}" if default else "(2, L // 2, L - 3)"
        trained = [k + 1 for k in nested] if nested and ints(nested) else None
        if trained is not None and default is not None and trained != default:
            out.append(error(variant, "vllm-aux-ignored", "vLLM will not use the head's aux layers",
                             f"the ids {nested} sit under eagle_config (SpecForge's layout, output of layer "
                             f"k); vLLM reads only a top-level eagle_aux_hidden_state_layer_ids and falls "
                             f"back to layers {where}, not the {trained} the head was trained on: accept "
                             "length near 1 and slower than the baseline (vllm-project/vllm#50170: 1.036, "
                             "0.70-0.79x)",
                             f'add "eagle_aux_hidden_state_layer_ids": {trained} at the top of the head\'s '
                             "config.json (vLLM's convention: input of layer k)"))
        elif trained is None:
            out.append(warning(variant, "vllm-aux-default", "the head's config names no aux layers",
                               f"vLLM falls back to the target's default layers {where} and says so only in "
                               "an INFO line; a head trained on other layers then accepts almost nothing "
                               "(vllm-project/vllm#50170: accept length 1.036, 0.70-0.79x the baseline)",
                               "write the layers the head was trained on into its config.json"))
        return out
    if not ints(top):
        return [error(variant, "vllm-aux-ids", f"eagle_aux_hidden_state_layer_ids {top} are not all integers",
                      "vLLM indexes decoder layers with them", "fix the head's config.json")]
    if L:
        bad = [i for i in top if not 1 <= i <= L - 1]
        if bad:
            out.append(error(variant, "vllm-aux-range", f"aux layer ids {bad} outside 1..{L - 1} for vLLM",
                             f"the target has {L} layers and vLLM captures the input of layer k (0 is the "
                             "embedding, L is past the last layer): those states are never captured",
                             "use the ids the head was trained with, in vLLM's convention"))
    if nested and ints(nested) and [k + 1 for k in nested] != top:
        out.append(warning(variant, "vllm-aux-disagree", "the head's two aux layer lists disagree",
                           f"top-level {top} (vLLM: input of layer k) vs eagle_config {nested} (SGLang: "
                           f"output of layer k, i.e. input of {[k + 1 for k in nested]}): vLLM and SGLang "
                           "tap different layers with this head", "keep one list, converted for each engine"))
    return out
