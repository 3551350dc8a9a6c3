"""`draftbench check` on vLLM arms against vLLM 0.26.0's own `vllm serve` parser and SpeculativeConfig
(captured from the release, harness/engines/vllm/serve_args.py), and the aux layers as that release reads a
head's config (vllm-project/vllm#50170)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from harness.engines.base import DrafterCheck
from harness.engines.vllm import launch, serve_args, serve_check
from harness.engines.vllm.preflight import configured_aux_layers, drafter_findings
from harness.inputs.config import Plan

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "fixtures" / "vllm-0.26.0" / "serve-parser-capture.json.gz"


def test_serve_args_is_generated_from_the_capture():
    """serve_args.py is the capture of 0.26.0's parser, rendered: nothing in it was edited by hand."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "h200" / "vllm"))
    import gen_serve_args

    cap = json.loads(gzip.decompress(CAPTURE.read_bytes()))
    assert cap["version"] == serve_args.VERSION == "0.26.0"
    assert gen_serve_args.render(cap) == (ROOT / "harness" / "engines" / "vllm" / "serve_args.py").read_text()


def _plan(**variant) -> Plan:
    return Plan.model_validate({
        "name": "p", "engine": "vllm", "target": {"vllm": {"version": "0.26.0"}},
        "model": {"path": "/m/tiny", "tp_size": 1, "served_model_name": "tiny"},
        "server": {"cuda_graph_max_bs": 16, "mem_fraction_static": 0.3},
        "variants": [{"name": "base"}, {"name": "spec", **variant}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})


SPEC = {"drafter": {"name": "d", "path": "/heads/e3"}, "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def _judge(plan: Plan, name: str, version: str = "0.26.0") -> dict:
    argv = launch.build_launch_argv(plan, plan.variant(name), 8000, version)
    return serve_check.judge(argv[len(launch.launcher_argv(plan.target)):], version)


def test_draftbench_s_own_argv_is_accepted_by_0_26():
    plan = _plan(**SPEC, cuda_graph=False)
    for name in ("base", "spec"):
        answer = _judge(plan, name)
        assert answer["stage"] == "ok", answer
    given = set(_judge(plan, "spec")["explicit"])
    assert {"speculative_config", "enforce_eager", "max_cudagraph_capture_size"} <= given


@pytest.mark.parametrize("extra, stage, words", [
    # SGLang's flag on a vLLM arm
    (["--speculative-num-steps", "3"], "parse", "unrecognized arguments: --speculative-num-steps"),
    # the per-request stats flag exists from 0.29.0 (vllm-project/vllm#48915): 0.26.0 refuses it
    (["--per-request-spec-decode-metrics", "summary"], "parse", "unrecognized arguments"),
    (["--dtype", "bf16"], "parse", "invalid choice: 'bf16'"),
    (["--max-num-seqs", "many"], "parse", "invalid int value"),
    (["--max", "8"], "parse", "ambiguous option"),
    (["--max_num_batched_tokens", "4096", "--attention-backend=TRITON_ATTN"], "ok", None),  # vLLM's spellings
    (["--enforce-eag"], "ok", None),  # an unambiguous abbreviation: argparse's default, which vLLM keeps
])
def test_extra_args_are_judged_by_the_real_parser(extra, stage, words):
    answer = _judge(_plan(**SPEC, extra_args=extra), "spec")
    assert answer["stage"] == stage and (words is None or words in answer["error"]), answer
    findings = serve_check.interpret("spec", answer, "0.26.0")
    assert [f.code for f in findings] == ([] if stage == "ok" else ["vllm-rejects"])


@pytest.mark.parametrize("cfg, words", [
    ({"method": "eagle3", "model": "/h", "num_steps": 3}, "unknown key 'num_steps'"),
    ({"method": "eagle-3", "model": "/h"}, "method 'eagle-3' is not one of vLLM's"),
    ({"method": "eagle3", "model": "/h", "num_speculative_tokens": 0}, "must be a positive integer"),
])
def test_speculative_config_is_judged_by_speculative_config(cfg, words):
    answer = serve_check.judge(["/m", "--speculative-config", json.dumps(cfg)], "0.26.0")
    assert answer["stage"] == "spec-config" and words in answer["error"]
    assert [f.code for f in serve_check.interpret("v", answer, "0.26.0")] == ["vllm-spec-config"]
    good = {"method": "eagle3", "model": "/h", "num_speculative_tokens": 3, "draft_sample_method": "greedy"}
    assert serve_check.judge(["/m", "-sc", json.dumps(good)], "0.26.0")["stage"] == "ok"


def test_other_releases_and_the_stand_in():
    assert serve_check.judge(["/m"], "0.33.0") is None  # not captured: nothing judged, and the check says so
    assert [f.code for f in serve_check.interpret("(plan)", None, "0.33.0")] == ["vllm-parser-unknown"]
    sim = serve_check.judge(["/m", "--max-model-len", "4096"], "0.33.0", simulated=True)
    assert sim["parser"] == "stand-in" and sim["stage"] == "ok"
    sim = serve_check.judge(["/m", "--attention-backend", "TRITON_ATTN"], "0.33.0", simulated=True)
    assert sim["stage"] == "parse" and "unrecognized arguments" in sim["error"]


@pytest.mark.parametrize("config, found", [
    ({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, ([2, 16, 29], "eagle_aux_hidden_state_layer_ids")),
    ({"eagle_aux_hidden_state_layer_ids": [], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3]}},
     None),  # an empty list is no list
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}, None),  # nested: never read
    ({"dflash_config": {"target_layer_ids": [1, 3]}}, ([2, 4], "dflash_config.target_layer_ids")),
    ({"dspark_target_layer_ids": [0, 5]}, ([1, 6], "dspark_target_layer_ids")),
    ({"target_layer_ids": [4]}, ([5], "target_layer_ids")),
])
def test_aux_layers_as_0_26_reads_them(config, found):
    assert configured_aux_layers(config) == found


def test_nested_ids_with_a_dflash_style_key_are_not_reported_ignored():
    """A head whose nested ids are not vLLM's default is an error (#50170) unless vLLM finds layers elsewhere
    in its config: `target_layer_ids` (+1) naming the same layers is what vLLM then uses."""
    argv = ["/m", "--speculative-config", json.dumps({"method": "eagle3", "model": "/h"})]
    nested = [1, 15, 28]  # SGLang's convention (output of layer k), a 32-layer target
    ignored = DrafterCheck("v", argv, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 9, 20]}},
                           [0, 9, 20], 32, "0.26.0")
    assert [f.code for f in drafter_findings(ignored)] == ["vllm-aux-ignored"]
    found = DrafterCheck("v", argv, {"target_layer_ids": [0, 9, 20],
                                     "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 9, 20]}},
                         [0, 9, 20], 32, "0.26.0")
    assert drafter_findings(found) == []
    default = DrafterCheck("v", argv, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": nested}},
                           nested, 32, "0.26.0")
    assert drafter_findings(default) == []  # nested + 1 is vLLM's default: the same layers either way


async def test_check_on_a_stand_in_plan_reports_a_flag_vllm_refuses(tmp_path):
    from harness.checks import run_checks
    from harness.targets.local import LocalTarget
    from tests.checks_helpers import load, write_models, write_plan

    workdir = write_models(tmp_path / "work")
    plan = load(write_plan(tmp_path / "plan", workdir, [
        {"name": "vllm-base", "engine": "vllm", "baseline": True},
        {"name": "vllm-typo", "engine": "vllm", "baseline": False,
         "extra_args": ["--max-modle-len", "4096"]}],
        target={"simulated": True, "vllm_launcher": [sys.executable, "-m", "harness.sim.vllm", "serve"]}))
    findings = await run_checks(plan, LocalTarget())
    bad = [f for f in findings if f.code == "vllm-rejects"]
    assert [f.variant for f in bad] == ["vllm-typo"] and "--max-modle-len" in bad[0].why
