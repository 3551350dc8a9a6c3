"""build_launch_argv is pure: the exact launch_server argv per variant and SGLang version."""

from pathlib import Path

import pytest

from harness.common.versions import parse_version
from harness.engines.sglang.launch import build_launch_argv, cuda_graph_max_bs_flag, spec_params
from harness.inputs.config import Variant, load_plan

ROOT = Path(__file__).resolve().parent.parent
BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K2.5", "--tp-size", "8",
        "--trust-remote-code", "--host", "127.0.0.1", "--port", "30001", "--max-running-requests", "32",
        "--enable-metrics", "--decode-log-interval", "10"]


@pytest.fixture(scope="module")
def kimi():
    return load_plan(ROOT / "plans" / "kimi-k25-node.yaml")


def test_baseline_argv(kimi):
    assert build_launch_argv(kimi, kimi.baseline, 30001, "0.5.15") == BASE


def test_eagle3_argv(kimi):
    v = kimi.variant("k25-eagle3-10k")
    assert build_launch_argv(kimi, v, 30001, "0.5.15") == BASE + [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
        "/models/drafters/kimi-k25-eagle3-10k", "--speculative-num-steps", "3", "--speculative-eagle-topk",
        "1", "--speculative-num-draft-tokens", "4"]


def test_topk1_forces_draft_tokens_and_graph_flags(kimi):
    v = kimi.variant("k25-eagle3-10k").model_copy(update={"num_steps": 5, "num_draft_tokens": 16,
                                                           "cuda_graph": False})
    kimi.server.cuda_graph_max_bs = 16
    try:
        old = build_launch_argv(kimi, v, 30001, "0.5.13")
        new = build_launch_argv(kimi, v, 30001, "0.5.20")
    finally:
        kimi.server.cuda_graph_max_bs = None
    assert old[old.index("--speculative-num-draft-tokens") + 1] == "6"  # steps + 1 with topk 1
    assert old[-1] == "--disable-cuda-graph" and new[-1] == "--disable-cuda-graph"
    assert old[old.index("--cuda-graph-max-bs") + 1] == "16"
    assert "--cuda-graph-max-bs" not in new and new[new.index("--cuda-graph-max-bs-decode") + 1] == "16"


def test_values_stay_single_argv_items(kimi):
    v = kimi.baseline.model_copy(update={"extra_args": ["--chat-template", "x; touch CANARY"]})
    argv = build_launch_argv(kimi, v, 30001, "0.5.15")
    assert argv[-2:] == ["--chat-template", "x; touch CANARY"]


def test_demo_plan_uses_the_stand_in():
    plan = load_plan(ROOT / "plans" / "demo.yaml")
    argv = build_launch_argv(plan, plan.variant("wrong-flag-eagle"), 4000, "0.5.15.post1")
    assert argv[1:3] == ["-m", "harness.sim"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE"
    weak = build_launch_argv(plan, plan.variant("seed-weak-eagle3"), 4000, "0.5.15.post1")
    assert weak[weak.index("--speculative-num-draft-tokens") + 1] == "16" and "--disable-cuda-graph" in weak


def test_versions():
    assert parse_version("0.5.15.post1") == (0, 5, 15, 1)
    assert parse_version("0.4.3.post4") < parse_version("0.5.3") < parse_version("0.5.10")
    assert cuda_graph_max_bs_flag("0.5.13") == "--cuda-graph-max-bs"
    assert cuda_graph_max_bs_flag("0.5.14") == "--cuda-graph-max-bs-decode"
    assert spec_params(Variant(name="v", drafter={"name": "d", "path": "/d"})) is None  # SGLang chooses
