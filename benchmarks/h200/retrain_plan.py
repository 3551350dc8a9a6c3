"""Write what benchmarks/h200/retrain.sh runs the retrain loop on, and print its shell variables.

  python3 benchmarks/h200/retrain_plan.py WORKDIR          # on the H200: the tiny target tiny_target.py
                                                           # trained
  python3 benchmarks/h200/retrain_plan.py WORKDIR --sim    # here: the same commands on draftbench's stand-in

GPU: WORKDIR/plans/retrain.yaml (baseline and `eagle3`, whose drafter is named, not inlined:
WORKDIR/drafters/tiny-head.yaml, so a promotion rewrites that file), the deployed head's path WORKDIR/head0
(a link retrain.sh points at the one-step head it trains), WORKDIR/seed.jsonl (that head's data: prompts of
the target's training files with a placeholder answer, so the head is as good as untrained) and
WORKDIR/regen-in.jsonl as the traffic log (prompts of files the target trained on; the loop has the target
answer them). Concurrency 1, one repeat: the gate's single look, a bootstrap over the held-out prompts.
--sim: tests/loop_helpers.py's scenario (a drafter weak on Python code) and a traffic log of code prompts.
Prints PLAN=, VARIANT=, TRAFFIC= lines for `eval`.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks" / "h200")]


def gpu(work: Path) -> dict[str, str]:
    from make_plan import COMMON_FLAGS, plan_of

    (work / "drafters").mkdir(parents=True, exist_ok=True)
    (work / "plans").mkdir(parents=True, exist_ok=True)
    (work / "drafters" / "tiny-head.yaml").write_text(yaml.safe_dump({
        "name": "tiny-head", "path": str(work / "head0"), "algorithm": "EAGLE3", "trained_for": "tiny-stdlib",
        "notes": "retrain.sh's deployed head: one step on placeholder answers, as good as untrained"},
                                                                     sort_keys=False))
    spec = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "cuda_graph": True}
    plan = plan_of("h200-retrain", "real SGLang 0.5.15.post1 on one H200: the tiny target, its deployed head "
                   "retrained by draftbench retrain", work, work / "tiny-stdlib", COMMON_FLAGS, {}, spec,
                   work / "suite.yaml", {"max_tokens": 96, "concurrency": [1], "repeats": 1, "max_repeats": 1,
                                         "warmup_requests": 2})
    plan["variants"] = [{"name": "baseline"},
                        {"name": "eagle3", "drafter": "tiny-head", "algorithm": "EAGLE3",
                                               **spec}]
    path = work / "plans" / "retrain.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    rows = [json.loads(x) for x in (work / "regen-in.jsonl").read_text().splitlines() if x.strip()]
    with open(work / "seed.jsonl", "w") as fh:
        for r in rows[:64]:
            user = r["conversations"][0]["content"]
            turns = [{"role": "user", "content": user}, {"role": "assistant", "content": user}]
            fh.write(json.dumps({"id": r["id"], "conversations": turns}) + "\n")
    return {"PLAN": str(path), "VARIANT": "eagle3", "TRAFFIC": str(work / "regen-in.jsonl")}


def sim(work: Path) -> dict[str, str]:
    from tests.loop_helpers import CODE, write_scenario

    path = write_scenario(work, concurrency=(1,), time_scale="0.1")
    traffic = work / "traffic.jsonl"
    traffic.write_text("".join(json.dumps({"custom_id": f"t{i}", "body": {"messages": [
        {"role": "user", "content": f"In Python, how would you write code that {what}?"}]}}) + "\n"
        for i, what in enumerate(CODE)))
    return {"PLAN": str(path), "VARIANT": "coder", "TRAFFIC": str(traffic)}


if __name__ == "__main__":
    work = Path(sys.argv[1]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    for key, value in (sim(work) if "--sim" in sys.argv[2:] else gpu(work)).items():
        print(f"{key}={shlex.quote(value)}")
