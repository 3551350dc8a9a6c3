"""A vLLM variant's `vllm serve` argv judged by the release's own parser, as captured (serve_args.py), or by
the stand-in's parser for a simulated target (pure functions; docs/vllm.md, "Preflight for vLLM variants").

`judge` parses the argv (launcher stripped) as vLLM's FlexibleArgumentParser would: an underscore in a flag's
name reads as a dash, `--flag=value` and unambiguous abbreviations work (argparse's default, kept by vLLM);
then it checks the --speculative-config JSON against SpeculativeConfig (vLLM refuses a key it lacks, and a
method it does not name). `interpret` turns the answer into findings."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from types import ModuleType
from typing import Any

from harness.common.findings import Finding, error, info
from harness.engines.vllm import serve_args

CAPTURED = {serve_args.VERSION: serve_args}  # the releases whose parser was captured


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _Refused(message)


def _parser_of(module: ModuleType) -> argparse.ArgumentParser:
    p = _Parser(prog="vllm serve", add_help=False)  # FlexibleArgumentParser keeps argparse's abbreviations
    p.add_argument("model_tag", nargs="?")
    for options, dest, kind, nargs, typ, choices in module.OPTIONS:
        kw: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
        if kind == "flag":
            kw["action"] = "store_true"
        elif kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            if nargs not in (None, 0):
                kw["nargs"] = nargs
            if typ == "int":
                kw["type"] = int
            elif typ == "float":
                kw["type"] = float
            if choices:
                kw["choices"] = list(choices)
        p.add_argument(*options, **kw)
    return p


def _normalise(argv: list[str]) -> list[str]:
    """vLLM's spelling rule: `--max_num_seqs` is `--max-num-seqs` (the name only, never the value)."""
    out = []
    for a in argv:
        m = re.match(r"^(--[^=.]+)(.*)$", a)
        out.append(m.group(1).replace("_", "-") + m.group(2) if m else a)
    return out


def spec_config_problems(cfg: object, fields: tuple[str, ...], methods: tuple[str, ...]) -> list[str]:
    """What SpeculativeConfig would refuse in a --speculative-config value."""
    if not isinstance(cfg, dict):
        return ["--speculative-config is not a JSON object"]
    out = [f"unknown key {k!r} (SpeculativeConfig has no such field)" for k in cfg if k not in fields]
    method = cfg.get("method")
    if method is not None and method not in methods:
        out.append(f"method {method!r} is not one of vLLM's ({', '.join(methods)})")
    k = cfg.get("num_speculative_tokens")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        out.append(f"num_speculative_tokens {k!r} must be a positive integer")
    return out


def judge(argv: list[str], version: str | None, *, simulated: bool = False) -> dict[str, Any] | None:
    """The parser's answer for one argv (without the launcher): {"parser", "stage": ok | parse | spec-config,
    "error", "explicit": the dests given}; None when no parser of that version is known."""
    if simulated:
        from harness.sim.vllm import args as sim_args

        p: argparse.ArgumentParser = sim_args.parser()
        argv = ["serve", *argv]
        fields, methods, who = None, sim_args.METHODS, "stand-in"
    elif version in CAPTURED:
        module = CAPTURED[version]
        p, fields, methods, who = (_parser_of(module), module.SPECULATIVE_FIELDS, module.SPECULATIVE_METHODS,
                                   version)
    else:
        return None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = p.parse_args(_normalise(argv))
    except (_Refused, SystemExit) as exc:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        message = str(exc) if isinstance(exc, _Refused) else (lines[-1] if lines else "argparse error")
        return {"parser": who, "stage": "parse", "error": message, "explicit": []}
    given = vars(ns)
    answer = {"parser": who, "stage": "ok", "error": None,
              "explicit": sorted(k for k in given if k not in ("model_tag", "command"))}
    raw = given.get("speculative_config")
    if raw is not None and fields is not None:
        try:
            cfg = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            return dict(answer, stage="spec-config", error=f"--speculative-config is not JSON: {exc}")
        problems = spec_config_problems(cfg, fields, methods)
        if problems:
            return dict(answer, stage="spec-config", error="; ".join(problems))
    return answer


def interpret(variant: str, answer: dict[str, Any] | None, version: str | None) -> list[Finding]:
    """Findings from `judge`'s answer (None: no parser of that version was captured)."""
    if answer is None:
        known = ", ".join(sorted(CAPTURED))
        which = version or "(version unknown)"
        return [info(variant, "vllm-parser-unknown",
                     f"vLLM {which}'s parser was not captured: its flags are not checked",
                     f"draftbench holds the parser of vLLM {known}",
                     "pin target.vllm.version to a captured release to have the argv checked")]
    where = "the vLLM stand-in" if answer["parser"] == "stand-in" else f"vLLM {answer['parser']}"
    if answer["stage"] == "parse":
        return [error(variant, "vllm-rejects", f"{where} rejects the launch arguments",
                      f"its argument parser says: {answer['error']}",
                      "remove the flag or spell it as `vllm serve --help` does (the variant's extra_args)")]
    if answer["stage"] == "spec-config":
        return [error(variant, "vllm-spec-config", f"{where} refuses the --speculative-config",
                      str(answer["error"]), "fix the variant's speculative settings or extra_args")]
    return []
