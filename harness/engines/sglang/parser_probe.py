"""Ask the target's own SGLang to judge each launch argv, without starting a server.

PROBE_SNIPPET runs on the target as `python -c PROBE_SNIPPET REQUEST_JSON`: it builds the installed
SGLang's argument parser (`ServerArgs.add_cli_args`) and runs its server-args post-processing
(`ServerArgs.from_cli_args`, `check_server_args`), which read config.json files but load no weights.
For the stand-in (`backend: sim`) it uses harness.sim.sglang.args.build_parser and
harness.sim.sglang.resolve.resolve, which mirror SGLang 0.5.15. It prints one marked JSON line; `interpret`
turns that into findings (pure).
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.common.findings import Finding, error, info, warning
from harness.engines.sglang.flags import FLAG_HISTORY

MARKER = "@@DRAFTBENCH-PROBE@@"
PROBE_TIMEOUT_S = 300.0  # importing SGLang (torch, CUDA) takes 10-60 s on a cold node

PROBE_SNIPPET = r"""
import argparse, contextlib, io, json, logging, re, sys
MARK = "@@DRAFTBENCH-PROBE@@"
req = json.loads(sys.argv[1])
sim = req.get("backend") == "sim"
out = {"importable": False, "version": None, "variants": {}}
def done():
    sys.stdout.write("\n" + MARK + json.dumps(out, default=repr) + "\n")
    sys.stdout.flush()
    sys.exit(0)
try:
    with contextlib.redirect_stdout(sys.stderr):
        if sim:
            from harness.sim.sglang import args as simargs
            from harness.sim.sglang import resolve as simres
            out["version"] = simres.VERSION
        else:
            import sglang
            out["version"] = getattr(sglang, "__version__", None)
            if req.get("variants"):  # the version alone needs no server_args (and no torch)
                from sglang.srt import server_args as sa
except BaseException as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
    done()
out["importable"] = True
ansi = re.compile(r"\x1b\[[0-9;]*m")
grabbed = []
class Grab(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            grabbed.append(record.getMessage())
logging.getLogger().addHandler(Grab())
def parser():
    if sim:
        return simargs.build_parser()
    p = argparse.ArgumentParser(prog="sglang serve")
    sa.ServerArgs.add_cli_args(p)
    return p
def explicit(argv):
    p = parser()
    for a in p._actions:
        if a.dest != "help":
            a.default = argparse.SUPPRESS
            a.required = False
    p._defaults = {}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return sorted(vars(p.parse_args(argv)))
    except SystemExit:
        return []
for name, argv in req.get("variants", {}).items():
    r = {"explicit": explicit(argv), "changed": {}, "resolved": {}, "warnings": []}
    out["variants"][name] = r
    err = io.StringIO()
    del grabbed[:]
    try:
        with contextlib.redirect_stderr(err):
            ns = parser().parse_args(argv)
    except SystemExit:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        r["stage"], r["error"] = "parse", (lines[-1] if lines else "argparse error")
        continue
    grabbed.extend(ln for ln in err.getvalue().splitlines() if ln.strip())  # deprecation notes
    given = dict(vars(ns))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            if sim:
                resolved, warns = simres.resolve(ns, req.get("target_arch") or "", seed=0)
                grabbed.extend(warns)
            else:
                obj = sa.ServerArgs.from_cli_args(ns)
                if hasattr(obj, "check_server_args"):
                    obj.check_server_args()
                resolved = dict((k, getattr(obj, k)) for k in given if hasattr(obj, k))
    except BaseException as e:
        r["stage"], r["error"] = "post_init", ("%s: %s" % (type(e).__name__, e)).rstrip(": ")
        r["warnings"] = [ansi.sub("", w) for w in grabbed]
        continue
    r["stage"] = "ok"
    r["warnings"] = [ansi.sub("", w) for w in grabbed]
    for k, v in given.items():
        if k in resolved and repr(resolved[k]) != repr(v):
            r["changed"][k] = [v, resolved[k]]
    for k in req.get("report", []):
        if k in resolved:
            r["resolved"][k] = resolved[k]
done()
"""

# Fields whose automatic values change what a speculative comparison measures.
WATCHED = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "max_running_requests",
    "speculative_algorithm",
    "disable_cuda_graph",
    "speculative_draft_model_path",
)
GRAPH_MAX_BS = ("cuda_graph_max_bs_decode", "cuda_graph_max_bs")
SPEC_TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
NOISE = ("is still supported, but 'sglang serve'",)  # warnings every launch prints
MAX_WARNINGS = 8


def probe_request(variants: dict[str, list[str]], *, sim: bool, target_arch: str | None) -> str:
    return json.dumps(
        {
            "backend": "sim" if sim else "sglang",
            "variants": variants,
            "target_arch": target_arch,
            "report": [*WATCHED, *GRAPH_MAX_BS, "cuda_graph_config"],
        }
    )


def parse_output(stdout: str) -> dict[str, Any] | None:
    """The probe's JSON, or None when the marked line is missing (the snippet did not get that far)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER) :])
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _same(a: object, b: object) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.upper() == b.upper() or (a.upper() == "NEXTN" and b.upper() == "EAGLE")
    return False


def _rejection_fix(message: str) -> str:
    for flag, hist in FLAG_HISTORY.items():
        if flag in message and (hist.replacement or hist.older):
            return f"spell it {hist.replacement or hist.older}"
    if "unrecognized arguments" in message:
        return "remove the flag or spell it as this SGLang version does (sglang.launch_server --help)"
    if "ambiguous option" in message:
        return "write the flag out in full"
    if "invalid choice" in message:
        return "use one of the choices listed in the message"
    return "fix the launch arguments (model.extra_args / variant settings)"


def decode_graph_max_bs(resolved: dict[str, Any]) -> int | None:
    """Largest decode batch captured in CUDA graphs, from the resolved server args (None when
    disabled/unknown). 0.5.14+ resolves it into cuda_graph_config (a repr string from SGLang, a dict from the
    stand-in)."""
    cfg = resolved.get("cuda_graph_config")
    if isinstance(cfg, dict) and isinstance(cfg.get("decode"), dict):
        dec = cfg["decode"]
        return None if dec.get("backend") == "disabled" else dec.get("max_bs")
    if isinstance(cfg, str):
        m = re.search(r"decode=PhaseConfig\(backend='(\w+)', max_bs=(\d+)", cfg)
        if m:
            return None if m.group(1) == "disabled" else int(m.group(2))
    for k in GRAPH_MAX_BS:
        if isinstance(resolved.get(k), int):
            return resolved[k]
    return None


def interpret(
    variant: str, result: dict[str, Any], version: str | None, max_batch: int | None = None
) -> list[Finding]:
    """Findings for one variant's probe result; max_batch: the largest decode batch the run will send."""
    where = f"SGLang {version}" if version else "the installed SGLang"
    stage = result.get("stage")
    message = str(result.get("error") or "")
    if stage == "parse":
        return [
            error(
                variant,
                "sglang-rejects",
                f"{where} rejects the launch arguments",
                f"its argument parser says: {message}",
                _rejection_fix(message),
            )
        ]
    out: list[Finding] = []
    if stage == "post_init":
        hint = ""
        if message.strip().rstrip(":") == "AssertionError" or message.startswith("TypeError"):
            hint = " (SGLang asserts that steps, topk and draft tokens are all set or all unset)"
        out.append(
            error(
                variant,
                "sglang-rejects",
                f"{where} refuses these server arguments",
                f"its server-args post-processing raised {message}{hint}",
                "fix the arguments it names; the server would exit at start-up",
            )
        )
    explicit = set(result.get("explicit") or [])
    changed = result.get("changed") or {}
    auto = {k: v for k, v in changed.items() if k not in explicit and k in WATCHED}
    triple = [auto.pop(k) for k in SPEC_TRIPLE if k in auto]
    if triple and len(triple) == 3:
        values = ", ".join(str(new) for _old, new in triple)
        out.append(
            info(
                variant,
                "sglang-auto",
                f"{where} picks steps, topk, draft tokens = ({values}) itself",
                "none of them was given, so it chooses by target architecture and version",
                "set all three to compare like with like",
            )
        )
    for k, (old, new) in sorted(auto.items()):
        out.append(
            info(
                variant,
                "sglang-auto",
                f"{where} sets {_flag(k)} to {new} (not given)",
                f"its default was {old}",
                f"pass {_flag(k)} explicitly to control it",
            )
        )
    for k, (old, new) in sorted(changed.items()):
        if k in explicit and not _same(old, new):
            out.append(
                warning(
                    variant,
                    "sglang-changes",
                    f"{where} changes {_flag(k)} from {old} to {new}",
                    "its server-args post-processing overrides the value given on the command line",
                    f"set {_flag(k)} to {new} yourself, or change what forces it",
                )
            )
    graph_bs = decode_graph_max_bs(result.get("resolved") or {})
    if graph_bs is not None and max_batch and graph_bs < max_batch:
        out.append(
            warning(
                variant,
                "cuda-graph-max-bs-low",
                f"{where} captures CUDA graphs up to batch {graph_bs}; the run sends up to {max_batch}",
                "decode steps above the captured size run eagerly ('cuda graph: False' windows)",
                f"set server.cuda_graph_max_bs to {max_batch}",
            )
        )
    seen = set()
    for w in result.get("warnings") or []:
        text = str(w).strip()
        if not text or text in seen or any(n in text for n in NOISE):
            continue
        seen.add(text)
        if len(seen) > MAX_WARNINGS:
            break
        out.append(info(variant, "sglang-warning", f"{where} warns: {text}"))
    return out
