"""`vllm.sh measure`'s plan: the decide stage's comparison on both engines, side by side (docs/vllm.md).

  python benchmarks/h200/vllm/make_vllm_plan.py WORKDIR [--sim]

Reads WORKDIR/decide.yaml (make_plan.py --decide: SGLang's baseline and EAGLE-3 on the trained tiny target,
c1 and c8, its suite, repeats and floor) and writes WORKDIR/vllm.yaml: the same run with vLLM's baseline and
EAGLE-3 arms added (the same head, K = num_steps chain, eagle_topk 1), so that each engine's EAGLE-3 is judged
against its own baseline and the two baselines against each other (the cross-engine rows); and
WORKDIR/vllm-bench.jsonl, the suite's prompts for `vllm bench serve --dataset-name custom`. MEASURE_ARMS=vllm
keeps vLLM's two arms only.
vLLM runs from /tmp/vllm-site (vllm.sh install) with the image's python; its own PYTHONPATH keeps SGLang's
/tmp/site (another transformers, openai, fastapi) out of it. --sim: the stand-ins (harness.sim.vllm)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

VLLM_VERSION = "0.26.0"
# `vllm serve` there (vllm.sh vllm_env): the site, no network, pytorch sampling, dev endpoints
LAUNCHER = ["env", "PYTHONPATH=/tmp/vllm-site", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1",
            "VLLM_NO_USAGE_STATS=1",
            "VLLM_USE_FLASHINFER_SAMPLER=0", "VLLM_SERVER_DEV_MODE=1", "VLLM_CACHE_ROOT=/tmp/cache/vllm",
            "python3", "-m", "vllm.entrypoints.cli.main", "serve"]
SIM_LAUNCHER = ["{python}", "-m", "harness.sim.vllm", "serve"]
# the flags vllm.sh's servers get (the Triton attention backend, as SGLang's runs use theirs)
FLAGS = ["--dtype", "bfloat16", "--attention-backend", "TRITON_ATTN",
         "--kernel-config", '{"enable_flashinfer_autotune":false}', "--seed", "0", "--max-model-len", "4096"]


def vllm_plan(plan: dict, sim: bool) -> dict:
    """decide.yaml's plan with the vLLM arms added."""
    out = dict(plan, name=plan["name"].replace("decide", "vllm"),
               description="SGLang 0.5.15.post1 and vLLM 0.26.0 on one H200: the trained tiny target, "
                           "baseline against its trained EAGLE-3 head on each engine")
    target = dict(out["target"])
    target["vllm"] = {"launcher": SIM_LAUNCHER if sim else LAUNCHER,
                      "version": "auto" if sim else VLLM_VERSION}
    out["target"] = target
    sgl = [v for v in plan["variants"] if not v.get("engine")]
    spec = next(v for v in sgl if v.get("algorithm"))
    flags = [] if sim else FLAGS  # the stand-in takes only the flags draftbench itself passes
    vllm = [{"name": "vllm-base", "engine": "vllm", "extra_args": flags},
            {**{k: spec[k] for k in ("drafter", "algorithm", "num_steps", "eagle_topk", "num_draft_tokens",
                                     "cuda_graph") if k in spec},
             "name": "vllm-eagle3", "engine": "vllm", "extra_args": flags}]
    # MEASURE_ARMS=vllm: vLLM's two arms alone (one 600 s call holds two server starts and the repeats);
    # all: SGLang's too, for the cross-engine rows
    out["variants"] = vllm if os.environ.get("MEASURE_ARMS", "all") == "vllm" else sgl + vllm
    return out


def main(workdir: str, sim: bool = False) -> None:
    work = Path(workdir).resolve()
    plan = yaml.safe_load((work / "decide.yaml").read_text())
    out = vllm_plan(plan, sim)
    (work / "vllm.yaml").write_text(yaml.safe_dump(out, sort_keys=False))
    suite = yaml.safe_load(Path(out["suites"][0]).read_text())
    with open(work / "vllm-bench.jsonl", "w") as fh:
        for p in suite["prompts"]:
            fh.write(json.dumps({"prompt": p["text"]}) + "\n")
    print(f"plan at {work / 'vllm.yaml'}: {[v['name'] for v in out['variants']]}, run {out['run']}")


if __name__ == "__main__":
    main(sys.argv[1], sim="--sim" in sys.argv[2:])
