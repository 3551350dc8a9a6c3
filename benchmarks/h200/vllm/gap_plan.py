"""WORKDIR/gap.yaml for `vllm.sh gap`: where draftbench's tok/s and `vllm bench serve`'s part on the same vLLM
servers. On the H200 (docs/vllm.md, "Measured") draftbench's c8 tok/s was 0.886x and 0.880x of vllm bench's
on the two vLLM arms, with the same prompts and output lengths; both shuffle their prompts (other seeds), and
draftbench asks for per-chunk usage (`continuous_usage_stats`), vllm bench does not.

The plan measures the two vLLM servers of a measure run as servers draftbench did not start
(`endpoint:` variants, never stopped by it): c8 only, the run's suite and output length, GAP_REPEATS (3)
repeats, so that the stage can put vllm bench's rounds (as it runs by default, and with continuous usage
stats) between draftbench's on the same servers.

    python3 benchmarks/h200/vllm/gap_plan.py WORKDIR PORTS_JSON   # {"vllm-base": PORT, "vllm-eagle3": PORT}
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml


def gap_plan(plan: dict, ports: dict[str, int]) -> dict:
    """vllm.yaml's vLLM arms as endpoint variants on `ports`, at c8."""
    arms = {v["name"]: v for v in plan["variants"] if v.get("engine") == "vllm"}
    missing = [name for name in ("vllm-base", "vllm-eagle3") if name not in arms or name not in ports]
    if missing:
        sys.exit(f"gap_plan.py: no vLLM arm or port for {missing} (vllm.yaml's variants, the ports given)")
    variants = []
    for name in ("vllm-base", "vllm-eagle3"):
        v = {k: arms[name][k] for k in ("name", "engine", "algorithm", "num_steps", "eagle_topk",
                                        "num_draft_tokens") if k in arms[name]}
        v["endpoint"] = f"http://127.0.0.1:{int(ports[name])}"
        variants.append(v)
    run = dict(plan["run"], concurrency=[8], repeats=int(os.environ.get("GAP_REPEATS", "3")),
               order="shuffled", per_request_spec="off")
    run.pop("stop", None)
    return dict(plan, name=plan["name"].replace("-vllm", "-gap"), variants=variants, run=run,
                description="draftbench on the measure run's two vLLM servers, between vllm bench's rounds")


def main(workdir: str, ports_json: str) -> None:
    work = Path(workdir).resolve()
    plan = yaml.safe_load((work / "vllm.yaml").read_text())
    out = gap_plan(plan, json.loads(ports_json))
    (work / "gap.yaml").write_text(yaml.safe_dump(out, sort_keys=False))
    print(f"plan at {work / 'gap.yaml'}: {[v['endpoint'] for v in out['variants']]}, run {out['run']}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
