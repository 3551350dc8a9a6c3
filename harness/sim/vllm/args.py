"""The `vllm serve` flags the stand-in accepts (a subset of vLLM 0.33.0's `engine/arg_utils.py` and
`entrypoints/openai/cli_args`); any other flag is an argparse error (exit 2), as in vLLM.

The release it answers as: 0.33.0, or the one `DRAFTBENCH_SIM_VLLM_VERSION` names. The version changes what
differs between releases where the harness reads it: `/version`, the startup line, and
`--per-request-spec-decode-metrics` (from 0.29.0; an argparse error before, as in vLLM 0.28.0)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from harness.common.versions import version_at_least

METHODS = ("eagle", "eagle3", "ngram", "draft_model", "mtp", "dflash")
VERSION = "0.33.0"
PER_REQUEST_SINCE = "0.29.0"  # engine/arg_utils.py: the flag and metrics.speculative_decoding (vllm#48915)


def emulated_version() -> str:
    return os.environ.get("DRAFTBENCH_SIM_VLLM_VERSION") or VERSION


def _spec_config(text: str) -> dict[str, Any]:
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return cfg


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model_tag")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--max-num-seqs", type=int, default=256)
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--max-cudagraph-capture-size", type=int, default=None)
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--speculative-config", type=_spec_config, default=None)
    if version_at_least(emulated_version(), PER_REQUEST_SINCE):
        s.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"),
                       default="none")
    else:
        s.set_defaults(per_request_spec_decode_metrics="none")
    s.add_argument("--max-model-len", type=int, default=None)
    s.add_argument("--disable-log-stats", action="store_true")
    s.add_argument("--disable-uvicorn-access-log", action="store_true")
    s.add_argument("--api-key", default=None)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    ns = parser().parse_args(argv)
    cfg = ns.speculative_config
    if cfg is not None and cfg.get("method") not in METHODS:
        parser().error(f"argument --speculative-config: unknown method {cfg.get('method')!r}")
    return ns
