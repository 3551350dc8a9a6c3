"""Shared by the preflight tests: plans with tiny real checkpoints in a temporary work directory, a fake
`sglang` package exposing the API the parser probe uses, and a fake nvidia-smi."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import yaml

from harness.inputs.config import load_plan
from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model

TARGET = {
    "hidden_size": 64,
    "num_layers": 16,
    "vocab_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
}

# The parts of sglang.srt.server_args the probe touches, with behaviour copied from SGLang's own rules
# (REFERENCE §5.1): all-three-or-none assertion, (5, 4, 8) auto choice for Llama, topk-1 adjustment,
# the 48-request reset, and the 0.5.20 flag set where --cuda-graph-max-bs is an ambiguous prefix.
FAKE_SERVER_ARGS = """
import argparse, dataclasses, json, logging, os
from typing import Optional
logger = logging.getLogger(__name__)

@dataclasses.dataclass
class ServerArgs:
    model_path: str
    tp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    max_running_requests: Optional[int] = None
    enable_metrics: bool = False
    decode_log_interval: int = 40
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_max_bs_prefill: Optional[int] = None
    disable_cuda_graph: bool = False

    def __post_init__(self):
        print("fake sglang: noise on stdout")
        with open(os.path.join(self.model_path, "config.json")) as f:  # SGLang reads the target config
            arch = json.load(f)["architectures"][0]
        if self.speculative_algorithm is None:
            return
        self.speculative_algorithm = self.speculative_algorithm.upper()
        if self.max_running_requests is None:
            self.max_running_requests = 48
            logger.warning("Max running requests is reset to 48 for speculative decoding.")
        if self.speculative_num_steps is None:
            assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None
            self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens = (
                (5, 4, 8) if arch == "LlamaForCausalLM" else (3, 1, 4))
        if self.speculative_eagle_topk == 1 \\
                and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                           "speculative_eagle_topk == 1")
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", dest="model_path", required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--decode-log-interval", type=int, default=40)
        parser.add_argument("--speculative-algorithm")
        parser.add_argument("--speculative-draft-model-path")
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--disable-cuda-graph", action="store_true")

    @classmethod
    def from_cli_args(cls, args):
        names = [f.name for f in dataclasses.fields(cls) if hasattr(args, f.name)]
        return cls(**{n: getattr(args, n) for n in names})

    def check_server_args(self):
        assert self.tp_size >= 1, "tp_size must be positive"
"""


def write_fake_sglang(root: Path, version: str = "0.5.20") -> Path:
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    return root


def write_fake_nvidia_smi(bindir: Path, rows: list[tuple[int, str, int, int]]) -> Path:
    """An nvidia-smi that answers the --query-gpu call with `rows` (index, name, total MiB, free MiB)."""
    bindir.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{i}, {name}, {total}, {free}\n" for i, name, total, free in rows)
    script = bindir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")
    script.chmod(0o755)
    return script


def write_models(workdir: Path, **drafter_kw) -> Path:
    """workdir/models/target (Llama-shaped) and workdir/models/draft (a matching EAGLE-3 drafter)."""
    target = write_target_model(workdir / "models" / "target", **TARGET)
    tcfg = json.loads((target / "config.json").read_text())
    args = {
        "target_hidden_size": 64,
        "hidden_size": 64,
        "vocab_size": 256,
        "draft_vocab_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    args.update(drafter_kw)
    draft = write_eagle3_drafter(workdir / "models" / "draft", **args)
    cfg = json.loads((draft / "config.json").read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):  # the same rope as the target
        cfg.pop(key, None)
        if key in tcfg:
            cfg[key] = tcfg[key]
    (draft / "config.json").write_text(json.dumps(cfg))
    return workdir


def write_plan(
    directory: Path,
    workdir: Path,
    variants: list[dict],
    *,
    target: dict | None = None,
    server: dict | None = None,
    trained_for: str | None = "models/target",
) -> Path:
    """A plan file (and its drafter record) in `directory`; returns the plan path."""
    directory.mkdir(parents=True, exist_ok=True)
    drafter = {"name": "draft", "path": "models/draft", "algorithm": "EAGLE3"}
    if trained_for:
        drafter["trained_for"] = trained_for
    (directory / "draft.yaml").write_text(yaml.safe_dump(drafter))
    plan = {
        "name": "checks",
        "target": {"host": "local", "python": sys.executable, "workdir": str(workdir), **(target or {})},
        "model": {"path": "models/target"},
        "server": {"port": "auto", "max_running_requests": 8, **(server or {})},
        "variants": variants,
        "suites": ["smoke"],
        "run": {"concurrency": [1, 4], "max_tokens": 64},
    }
    path = directory / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def load(path: Path):
    return load_plan(path)


def env_with(fake_root: Path | None = None, bindir: Path | None = None) -> dict[str, str]:
    env = {}
    if fake_root is not None:
        env["PYTHONPATH"] = str(fake_root)
    if bindir is not None:
        env["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()
