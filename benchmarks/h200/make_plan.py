"""Write the plans, the suite and bench_serving's dataset for the H200 runs (docs/real-gpu.md).

Run on the GPU machine from the repository root:
  python3 benchmarks/h200/make_plan.py WORKDIR          # random weights, SGLang makes them
                                                        # (--load-format dummy)
  python3 benchmarks/h200/make_plan.py --tiny WORKDIR   # the trained tiny target and its trained drafter
  python3 benchmarks/h200/make_plan.py --endpoints WORKDIR WARM_RUN_DIR [--sim]
      # decide.sh serve: the verdict and request-rate plans against the servers the warm run kept
  python3 benchmarks/h200/make_plan.py --decide WORKDIR [--sim]
  python3 benchmarks/h200/make_plan.py --aa WORKDIR     # random weights: A/A and CUDA graphs off,
                                                        # run.stop decided
      # decide.sh: baseline and EAGLE3 on the trained tiny target, repeats for the speedup's interval;
      # --sim: the same plan on draftbench's SGLang stand-in (the demo's checkpoints), for a dry run here
Paths are made absolute there.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import yaml

from harness.inputs.suites import load_suite

ROOT = Path(__file__).resolve().parents[2]
COMMON_FLAGS = [  # GPU.md: the defaults need FlashAttention-3 or downloads, which that machine lacks
    "--dtype", "bfloat16", "--attention-backend", "triton",
    "--sampling-backend", "pytorch", "--grammar-backend", "none", "--disable-flashinfer-autotune",
    "--context-length", "4096", "--cuda-graph-max-bs-decode", "16",
    "--disable-prefill-cuda-graph", "--random-seed", "0", "--watchdog-timeout", "600",
]
SERVER_FLAGS = ["--load-format", "dummy", *COMMON_FLAGS]
SPEC = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "cuda_graph": True}


def plan_of(name: str, description: str, work: Path, model: Path, flags: list[str], drafter: dict, spec: dict,
            suite: Path, run: dict) -> dict:
    """A local-target plan on that machine: baseline, EAGLE3, and the same drafter with the wrong flag."""
    return {
        "name": name, "description": description,
        "target": {"host": "local", "python": "python3", "workdir": str(work),
                   "sglang_version": "0.5.15.post1", "env": {"PYTHONPATH": "/tmp/site"}},
        "model": {"path": str(model), "tp_size": 1, "extra_args": flags},
        # mem_fraction_static as a server setting, not an extra flag: draftbench keeps a finished variant's
        # server up (--keep-servers) next to the next one only when it knows they fit (harness.serve.kept)
        "server": {"host": "127.0.0.1", "port": "auto", "max_running_requests": 32, "decode_log_interval": 10,
                   "mem_fraction_static": 0.26,
                   "startup_timeout_s": 420},
        "variants": [{"name": "baseline"},
                     {"name": "eagle3", "drafter": drafter, "algorithm": "EAGLE3", **spec},
                     {"name": "wrong-flag-eagle", "drafter": drafter, "algorithm": "EAGLE", **spec}
                     ][: int(os.environ.get("VARIANTS", "3"))],
        "suites": [str(suite)],
        "run": {"concurrency": [int(c) for c in os.environ.get("CONCURRENCY", "1,8").split(",")],
                "temperature": 0.0, "warmup_requests": 2, "ignore_eos": True, "request_timeout_s": 300,
                "repeats": int(os.environ.get("REPEATS", "1")),
                "connections": os.environ.get("CONNECTIONS", "keep-alive"), **run},
    }


def tiny(workdir: str) -> None:
    """Plan for the tiny target trained by tiny_target.py and the drafter trained on its own answers
    (WORKDIR/tiny-stdlib, WORKDIR/draft, WORKDIR/suite.yaml): baseline, EAGLE3, and the wrong flag."""
    work = Path(workdir).resolve()
    drafter = {"name": "tiny-stdlib-eagle3", "path": str(work / "draft"), "algorithm": "EAGLE3",
               "trained_for": "tiny-stdlib"}
    plan = plan_of("h200-tiny-trained",
                   "real SGLang 0.5.15.post1 on one H200: a byte-level Llama trained on the "
                   "Python standard library, and an EAGLE-3 head trained on the target's own answers",
                   work, work / "tiny-stdlib", COMMON_FLAGS, drafter, SPEC, work / "suite.yaml",
                   {"max_tokens": int(os.environ.get("MAX_TOKENS", "192")), "order": "shuffled"})
    (work / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    suite = load_suite(work / "suite.yaml")
    with open(work / "bench.jsonl", "w") as fh:  # the same prompts for bench_serving's custom dataset
        for p in suite.prompts:
            fh.write(json.dumps({"conversations": [{"role": "user", "content": p.text},
                                                   {"role": "assistant", "content": "x"}]}) + "\n")
    print(f"plan at {work / 'plan.yaml'}, {len(suite.prompts)} prompts")


def main(workdir: str) -> None:
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    models = ROOT / ".devbundle" / "models"
    cats = load_suite(ROOT / "suites" / "categories.yaml")
    single = [p for p in cats.prompts if p.text or (p.messages and len(p.messages) == 1)]
    prompts = [{"id": p.id, "category": p.category,
                "text": p.text if p.text else p.messages[0].content} for p in single]
    # bench_serving's custom dataset does random.seed(42); random.shuffle(rows): draftbench replays the suite
    # in that same order (run.order: suite), so that both tools send the same requests in the same waves
    same = list(prompts)
    random.Random(42).shuffle(same)
    (work / "h200.yaml").write_text(yaml.safe_dump({"name": "h200", "description": "single-turn prompts of "
                                                   "suites/categories.yaml, in bench_serving's order",
                                                   "prompts": same}, sort_keys=False))
    # bench_serving --dataset-name custom: user turn, assistant turn
    with open(work / "h200.jsonl", "w") as fh:
        for p in prompts:
            fh.write(json.dumps({"conversations": [{"role": "user", "content": p["text"]},
                                                   {"role": "assistant", "content": "x"}]}) + "\n")
    drafter = {"name": "random-eagle3", "path": str(models / "draft"), "algorithm": "EAGLE3",
               "trained_for": "random weights (SGLang --speculative-draft-load-format dummy)"}
    spec = dict(SPEC, extra_args=["--speculative-draft-load-format", "dummy"])
    plan = plan_of("h200-sglang-0.5.15",
                   "real SGLang 0.5.15.post1 on one H200, Llama-8B shape, random weights", work,
                   models / "target", SERVER_FLAGS, drafter, spec, work / "h200.yaml",
                   {"max_tokens": 128, "order": os.environ.get("ORDER", "suite")})
    (work / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    print(f"{len(prompts)} prompts; plan at {work / 'plan.yaml'}")


def decide(workdir: str, sim: bool = False) -> None:
    """decide.sh's two plans, on the trained tiny target, baseline and EAGLE3 only, concurrency 1 and 8:
    WORKDIR/decide.yaml (verdict stage): the whole suite, run.repeats 3 for the speedup's interval, and a
      steady-state floor that this suite's phases reach inside one device call; no per-request probe pass
      (it would replay every EAGLE3 phase once more, untimed; the accept length still has two sources).
    WORKDIR/tune.yaml (tune stage): the suite's first TUNE_PROMPTS prompts, TUNE_TOKENS tokens, one repeat,
      with the probe pass, whose per-request histograms are what `draftbench tune` predicts from.
    WORKDIR/warm.yaml (warm stage): 8 prompts, 32 tokens, one repeat: the servers' one-off compiles.
    WORKDIR/lossless.yaml (lossless stage): the whole suite once per concurrency, then the lossless audit.
    Knobs: MAX_TOKENS (384), REPEATS (3), MIN_STEADY_S (3), TUNE_PROMPTS (32; decide.sh: 64),
    TUNE_TOKENS (256).
    --sim: the same settings on the stand-in (harness.sim) with the demo's checkpoints and a short suite of
    its own, so that every draftbench command of decide.sh can be tried here first."""
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    drafter = {"name": "tiny-stdlib-eagle3", "path": str(work / "draft"), "algorithm": "EAGLE3",
               "trained_for": "tiny-stdlib"}
    suite_path = work / "suite.yaml"
    if sim:
        from harness.cli.demo import write_demo_models

        write_demo_models(work / "sim-target")  # demo-models/ there: the relative paths below
        drafter = {"name": "demo-good-eagle3", "path": "demo-models/good-eagle3", "algorithm": "EAGLE3"}
        suite_path = work / "sim-suite.yaml"
        suite_path.write_text(yaml.safe_dump({"name": "sim-decide", "description": "dry run of decide.sh",
                                              "prompts": [{"id": f"s{i:05d}", "category": "code",
                                                           "text": f"def f{i}(x):\n    return x + {i}\n"}
                                                          for i in range(32)]}, sort_keys=False))
    suite = yaml.safe_load(suite_path.read_text())
    if not (work / "bench.jsonl").exists():  # bench_serving's dataset (--tiny writes it on the GPU machine)
        with open(work / "bench.jsonl", "w") as fh:
            for p in load_suite(suite_path).prompts:
                fh.write(json.dumps({"conversations": [{"role": "user", "content": p.text},
                                                       {"role": "assistant", "content": "x"}]}) + "\n")
    tune_suite = dict(suite, name=suite["name"] + "-tune",
                      prompts=suite["prompts"][: int(os.environ.get("TUNE_PROMPTS", "32"))])
    (work / "tune-suite.yaml").write_text(yaml.safe_dump(tune_suite, sort_keys=False))
    (work / "warm-suite.yaml").write_text(yaml.safe_dump(dict(suite, name=suite["name"] + "-warm",
                                                              prompts=suite["prompts"][:8]), sort_keys=False))
    floor = float(os.environ.get("MIN_STEADY_S", "3"))
    runs = {"decide": ({"max_tokens": int(os.environ.get("MAX_TOKENS", "384")), "order": "shuffled",
                        "repeats": int(os.environ.get("REPEATS", "3")), "min_steady_s": floor,
                        "per_request_spec": "off"}, suite_path),
            # the stopping rule's looks in the tune's wide and verify runs: 2, 4, 6 repeats (99.5/99.5/96 %)
            "tune": ({"max_tokens": int(os.environ.get("TUNE_TOKENS", "256")), "order": "shuffled",
                      "repeats": 2, "max_repeats": int(os.environ.get("TUNE_MAX_REPEATS", "6")),
                      "min_steady_s": floor}, work / "tune-suite.yaml"),
            # decide.sh warm: one short pass through both servers, so that the first EAGLE-3 server's one-off
            # JIT compile (about 2 minutes in its first decode on a fresh machine) is paid before measuring
            "warm": ({"max_tokens": 32, "repeats": 1, "warmup_requests": 8, "per_request_spec": "off"},
                     work / "warm-suite.yaml"),
            # decide.sh lossless: one timed pass per concurrency at the verdict's length (where the trained
            # head matched 81-86 % of prompts), then the lossless audit on the baseline's server
            # (harness.bench.audit)
            "lossless": ({"max_tokens": int(os.environ.get("MAX_TOKENS", "384")), "order": "shuffled",
                          "repeats": 1, "min_steady_s": 0, "phase_sizing": False, "per_request_spec": "off",
                          "lossless_audit": True}, suite_path)}
    for name, (run, path) in runs.items():
        plan = plan_of(f"h200-tiny-{name}", "real SGLang 0.5.15.post1 on one H200: the trained tiny target, "
                       "baseline against its trained EAGLE-3 head", work, work / "tiny-stdlib", COMMON_FLAGS,
                       drafter, SPEC, path, run)
        plan["variants"] = plan["variants"][:2]
        if sim:
            plan["name"] += "-sim"
            plan["target"] = {"host": "local", "launcher": ["{python}", "-m", "harness.sim"],
                              "workdir": str(work / "sim-target"), "simulated": True}
            plan["model"] = {"path": "demo-models/target", "tp_size": 1, "served_model_name": "demo-target"}
            plan["server"]["startup_timeout_s"] = 120
            if name == "lossless":  # the stand-in's bf16-like near-ties, so that the dry run has divergences
                plan["target"]["env"] = {"DRAFTBENCH_SIM_NEAR_TIES": "0.01"}
        (work / f"{name}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
        print(f"plan at {work / f'{name}.yaml'}: {len(plan['variants'])} variants, "
              f"{len(yaml.safe_load(path.read_text())['prompts'])} prompts, run {plan['run']}")


def aa(workdir: str) -> None:
    """WORKDIR/aa.yaml (decide.sh aa): what the stopping rule decides on real SGLang when nothing needs
    training: the Llama-8B-shaped random-weight target against an identical copy of itself (an A/A arm: the
    truth is 1.00x, so `equivalent` or `undecided` are right and `faster`/`slower` wrong) and against itself
    with CUDA graphs off (an A/B arm that is really slower), at concurrency 8, `run.stop: decided` (looks
    after 2, 4, 6 repeats), all three servers kept up so that the arms run repeat by repeat side by side."""
    work = Path(workdir).resolve()
    main(str(work))  # the suite (h200.yaml) and plan.yaml of the random-weight runs
    plan = yaml.safe_load((work / "plan.yaml").read_text())
    plan["name"] = "h200-aa-decided"
    plan["description"] = "real SGLang 0.5.15.post1 on one H200, Llama-8B shape, random weights: A/A and " \
        "graphs off"
    plan["variants"] = [{"name": "baseline", "baseline": True},
                        {"name": "baseline-copy", "baseline": False},
                        {"name": "no-cuda-graph", "baseline": False, "cuda_graph": False}]
    plan["run"].update(concurrency=[8], repeats=2, max_repeats=int(os.environ.get("AA_MAX_REPEATS", "6")),
                       stop="decided", max_tokens=int(os.environ.get("AA_TOKENS", "64")), order="shuffled",
                       min_steady_s=float(os.environ.get("MIN_STEADY_S", "3")))
    (work / "aa.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    print(f"plan at {work / 'aa.yaml'}: {[v['name'] for v in plan['variants']]}, run {plan['run']}")


def endpoints(workdir: str, warm_run: str, sim: bool = False) -> None:
    """decide.sh serve: plans against the two servers the warm run kept (its servers.jsonl), which draftbench
    then measures as servers it did not start (`endpoint:` variants) and never stops:
    WORKDIR/endpoints.yaml: baseline vs EAGLE3 at concurrency 8 only, the whole suite, ENDPOINT_REPEATS (5)
      repeats: the verdict that bench_serving's two rounds on the same servers are compared with;
    WORKDIR/rates.yaml: open-loop request rates RATES (4,16 per second) on TUNE_PROMPTS prompts and a
      closed-loop c8 phase (a run needs one concurrency level), with an SLO for goodput."""
    work = Path(workdir).resolve()
    servers = [json.loads(line) for line in (Path(warm_run) / "servers.jsonl").read_text().splitlines()
               if line]
    kept = {e["variant"] for e in servers if e.get("state") == "kept"}
    ports = {e["variant"]: e["port"] for e in servers if "port" in e}
    missing = [v for v in ("baseline", "eagle3") if v not in kept or v not in ports]
    if missing:
        sys.exit(f"make_plan.py --endpoints: the warm run {warm_run} did not keep {missing} (servers.jsonl)")
    base = yaml.safe_load((work / "warm.yaml").read_text())
    variants = [{"name": "baseline", "endpoint": f"http://127.0.0.1:{ports['baseline']}"},
                # the plan names what it expects; draftbench checks it against the server's /get_server_info
                {"name": "eagle3", "endpoint": f"http://127.0.0.1:{ports['eagle3']}", "algorithm": "EAGLE3",
                 **{k: v for k, v in SPEC.items() if k != "cuda_graph"}}]
    suite = work / ("sim-suite.yaml" if sim else "suite.yaml")
    floor = float(os.environ.get("MIN_STEADY_S", "3"))
    plans = {
        "endpoints": ({"concurrency": [8], "max_tokens": int(os.environ.get("MAX_TOKENS", "384")),
                       "order": "shuffled", "repeats": int(os.environ.get("ENDPOINT_REPEATS", "5")),
                       "min_steady_s": floor, "per_request_spec": "off", "warmup_requests": 2}, suite),
        "rates": ({"concurrency": [8], "max_tokens": int(os.environ.get("TUNE_TOKENS", "256")), "repeats": 1,
                   "request_rate": [float(r) for r in os.environ.get("RATES", "4,16").split(",")],
                   "burstiness": 1.0, "seed": 1, "slo": {"ttft_ms": 100, "tpot_ms": 3},
                   "per_request_spec": "off", "warmup_requests": 2}, work / "tune-suite.yaml"),
    }
    for name, (run, path) in plans.items():
        plan = dict(base, name=base["name"].replace("-warm", f"-{name}"), variants=variants,
                    suites=[str(path)])
        plan["run"] = dict({k: v for k, v in base["run"].items() if k not in ("warmup_requests",)}, **run)
        (work / f"{name}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
        print(f"plan at {work / f'{name}.yaml'}: endpoints "
              f"{[v['endpoint'] for v in variants]}, run {plan['run']}")


def decided(workdir: str, tune_dir: str, concurrency: int = 8) -> None:
    """WORKDIR/decided.yaml (decide.sh decided): baseline against the tune's pick at `concurrency`, for
    `draftbench run --until-decided`: the pick is the config its answer names there (a verified `faster`
    row, else the best predicted one), on decide.yaml's suite and settings, looks after 2, 4 and 8 repeats."""
    import pandas as pd

    work = Path(workdir).resolve()
    rows = pd.read_csv(Path(tune_dir) / "tune.csv")
    at = rows[rows["concurrency"] == concurrency]
    fast = at[(at["measured"] == "verified") & (at["verdict"] == "faster")]
    pick = (fast.loc[fast["speedup"].idxmax()] if not fast.empty else
            at.loc[pd.to_numeric(at["speedup_pred"], errors="coerce").idxmax()])
    plan = yaml.safe_load((work / "decide.yaml").read_text())
    spec = next(v for v in plan["variants"] if v.get("algorithm"))
    spec.update(name=f"pick-s{int(pick.num_steps)}k{int(pick.eagle_topk)}d{int(pick.num_draft_tokens)}",
                num_steps=int(pick.num_steps), eagle_topk=int(pick.eagle_topk),
                num_draft_tokens=int(pick.num_draft_tokens), cuda_graph=bool(pick.cuda_graph))
    plan["variants"] = [v for v in plan["variants"] if not v.get("algorithm")][:1] + [spec]
    plan["name"] = plan["name"].replace("decide", "decided")
    plan["run"].update(concurrency=[concurrency], repeats=2,
                       max_repeats=int(os.environ.get("DECIDED_MAX_REPEATS", "8")), stop="decided")
    (work / "decided.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    print(f"plan at {work / 'decided.yaml'}: baseline vs {spec['name']} at c{concurrency} (tune's pick: "
          f"{pick.status}, verdict {pick.verdict}), run {plan['run']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--decided"]:
        decided(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--endpoints"]:
        endpoints(sys.argv[2], sys.argv[3], sim="--sim" in sys.argv[4:])
    elif sys.argv[1:2] == ["--aa"]:
        aa(sys.argv[2])
    elif sys.argv[1:2] == ["--tiny"]:
        tiny(sys.argv[2])
    elif sys.argv[1:2] == ["--decide"]:
        decide(sys.argv[2], sim="--sim" in sys.argv[3:])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else ".dbwork")
