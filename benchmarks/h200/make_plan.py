"""Write the plan, the suite and bench_serving's dataset for the H200 run (docs/real-gpu.md).

Run on the GPU machine from the repository root: python3 benchmarks/h200/make_plan.py WORKDIR
Paths are made absolute there; SGLang builds random weights itself (--load-format dummy).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from harness.suites import load_suite

ROOT = Path(__file__).resolve().parents[2]
SERVER_FLAGS = [  # GPU.md: the defaults need FlashAttention-3 or downloads, which that machine lacks
    "--load-format", "dummy", "--dtype", "bfloat16", "--attention-backend", "triton",
    "--sampling-backend", "pytorch", "--grammar-backend", "none", "--disable-flashinfer-autotune",
    "--mem-fraction-static", "0.26", "--context-length", "4096", "--cuda-graph-max-bs-decode", "16",
    "--disable-prefill-cuda-graph", "--random-seed", "0", "--watchdog-timeout", "600",
]


def main(workdir: str) -> None:
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    models = ROOT / ".devbundle" / "models"
    cats = load_suite(ROOT / "suites" / "categories.yaml")
    single = [p for p in cats.prompts if p.text or (p.messages and len(p.messages) == 1)]
    prompts = [{"id": p.id, "category": p.category,
                "text": p.text if p.text else p.messages[0].content} for p in single]
    (work / "h200.yaml").write_text(yaml.safe_dump({"name": "h200", "description": "single-turn prompts of "
                                                   "suites/categories.yaml", "prompts": prompts}, sort_keys=False))
    with open(work / "h200.jsonl", "w") as fh:  # bench_serving --dataset-name custom: user turn, assistant turn
        for p in prompts:
            fh.write(json.dumps({"conversations": [{"role": "user", "content": p["text"]},
                                                   {"role": "assistant", "content": "x"}]}) + "\n")
    drafter = {"name": "random-eagle3", "path": str(models / "draft"), "algorithm": "EAGLE3",
               "trained_for": "random weights (SGLang --speculative-draft-load-format dummy)"}
    spec = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "cuda_graph": True,
            "extra_args": ["--speculative-draft-load-format", "dummy"]}
    plan = {
        "name": "h200-sglang-0.5.15",
        "description": "real SGLang 0.5.15.post1 on one H200, Llama-8B shape, random weights",
        "target": {"host": "local", "python": "python3", "workdir": str(work), "sglang_version": "0.5.15.post1",
                   "env": {"PYTHONPATH": "/tmp/site"}},
        "model": {"path": str(models / "target"), "tp_size": 1, "extra_args": SERVER_FLAGS},
        "server": {"host": "127.0.0.1", "port": "auto", "max_running_requests": 32, "decode_log_interval": 10,
                   "startup_timeout_s": 420},
        "variants": [{"name": "baseline"},
                     {"name": "eagle3", "drafter": drafter, "algorithm": "EAGLE3", **spec},
                     {"name": "wrong-flag-eagle", "drafter": drafter, "algorithm": "EAGLE", **spec}],
        "suites": [str(work / "h200.yaml")],
        "run": {"concurrency": [int(c) for c in os.environ.get("CONCURRENCY", "1,8").split(",")], "max_tokens": 128, "temperature": 0.0, "warmup_requests": 2,
                "ignore_eos": True, "request_timeout_s": 300},
    }
    (work / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    print(f"{len(prompts)} prompts; plan at {work / 'plan.yaml'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".dbwork")
