"""Flag checks on launch argv built by harness.engines.sglang.launch, against the version facts of REFERENCE
§5."""

from __future__ import annotations

import pytest

from harness.engines.sglang import flags as fl
from harness.engines.sglang.launch import build_launch_argv
from harness.inputs.config import Plan, Variant


def _variant(name="v", algorithm="EAGLE3", steps=3, topk=1, ndt=4, cuda_graph=True, extra=(), baseline=False):
    return Variant.model_validate({
        "name": name, "algorithm": algorithm, "baseline": baseline,
        "drafter": {"name": "d", "path": "/d", "algorithm": "EAGLE3"} if algorithm else None,
        "num_steps": steps, "eagle_topk": topk, "num_draft_tokens": ndt, "cuda_graph": cuda_graph,
        "extra_args": list(extra)})


def _plan(cuda_graph_max_bs=None, model_extra=()):
    return Plan.model_validate({
        "name": "flags", "model": {"path": "/m", "extra_args": list(model_extra)},
        "server": {"max_running_requests": 32, "decode_log_interval": 10,
                   "cuda_graph_max_bs": cuda_graph_max_bs},
        "variants": [{"name": "base"}], "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})


def _codes(findings):
    return [f.code for f in findings]


def test_flag_values():
    argv = ["python3", "-m", "x", "--a", "1", "--flag", "--b=2", "--a", "3", "--last"]
    assert fl.flag_values(argv) == {"--a": "3", "--flag": None, "--b": "2", "--last": None}


@pytest.mark.parametrize(
    "version,severity,code",
    [
        ("0.5.13", None, None),
        ("0.5.15.post1", "info", "flag-deprecated"),
        ("0.5.20", "error", "flag-renamed"),
        ("0.5.23", "error", "flag-renamed"),
    ],
)
def test_cuda_graph_max_bs_spelling_by_version(version, severity, code):
    argv = ["--cuda-graph-max-bs", "64"]
    found = fl.check_flag_versions("v", argv, version, None)
    assert [(f.severity, f.code) for f in found] == ([(severity, code)] if code else [])
    if code == "flag-renamed":
        assert found[0].fix == "spell it --cuda-graph-max-bs-decode"
        assert "ambiguous option" in found[0].why


def test_new_spelling_on_old_version():
    found = fl.check_flag_versions("v", ["--cuda-graph-max-bs-decode", "64"], "0.5.13", None)
    assert [(f.severity, f.code, f.fix) for f in found] == [
        ("error", "flag-not-in-version", "spell it --cuda-graph-max-bs")
    ]
    assert fl.check_flag_versions("v", ["--cuda-graph-max-bs-decode", "64"], "0.5.14", None) == []


def test_launcher_spelling_follows_the_version_it_was_built_for():
    """Built for the pinned version, judged against the installed one: a stale pin is an error."""
    plan, v = _plan(cuda_graph_max_bs=64), _variant()
    built_old = build_launch_argv(plan, v, 30000, "0.5.13")
    assert fl.check_flag_versions(v.name, built_old, "0.5.13", v.spec_algorithm) == []
    assert _codes(fl.check_flag_versions(v.name, built_old, "0.5.21", v.spec_algorithm)) == ["flag-renamed"]
    built_new = build_launch_argv(plan, v, 30000, "0.5.21")
    assert fl.check_flag_versions(v.name, built_new, "0.5.21", v.spec_algorithm) == []


def test_unknown_version_skips_version_windows():
    assert (
        fl.check_flag_versions("v", ["--cuda-graph-max-bs", "8", "--speculative-adaptive"], None, "DFLASH")
        == []
    )


def test_algorithm_and_flags_newer_than_installed():
    found = fl.check_flag_versions("v", ["--speculative-draft-window-size", "512"], "0.5.10", "DFLASH")
    assert sorted(_codes(found)) == ["algorithm-not-in-version", "flag-not-in-version"]
    assert fl.check_flag_versions("v", [], "0.5.11", "DFLASH") == []


def test_partial_spec_params_from_extra_args():
    v = _variant(steps=None, topk=None, ndt=None, extra=["--speculative-num-steps", "4"])
    argv = build_launch_argv(_plan(), v, 30000, "0.5.15")
    found = fl.check_spec_params(v, argv, "0.5.15", "LlamaForCausalLM")
    assert [(f.severity, f.code) for f in found] == [("error", "spec-params-partial")]
    assert "--speculative-eagle-topk" in found[0].what and "--speculative-num-draft-tokens" in found[0].what


def test_auto_spec_params_prediction():
    v = _variant(steps=None, topk=None, ndt=None)
    argv = build_launch_argv(_plan(), v, 30000, "0.5.15")
    found = fl.check_spec_params(v, argv, "0.5.15", "Qwen3ForCausalLM")
    assert _codes(found) == ["spec-params-auto"] and "(3, 1, 4" in found[0].what
    assert "(5, 4, 8" in fl.check_spec_params(v, argv, "0.5.7", "Qwen3ForCausalLM")[0].what
    assert "(5, 4, 8" in fl.check_spec_params(v, argv, "0.5.15", "LlamaForCausalLM")[0].what
    assert fl.check_spec_params(v, argv, "0.5.15", "LlamaForCausalLM", tables=False) == []


def test_draft_tokens_beyond_the_tree():
    v = _variant(steps=2, topk=2, ndt=8)
    argv = build_launch_argv(_plan(), v, 30000, "0.5.15")
    found = fl.check_spec_params(v, argv, "0.5.15", None)
    assert [(f.severity, f.code) for f in found] == [("error", "draft-tokens-too-many")]
    assert "≤ 5" in found[0].fix
    ok = _variant(steps=2, topk=2, ndt=5)
    assert fl.check_spec_params(ok, build_launch_argv(_plan(), ok, 1, "0.5.15"), "0.5.15", None) == []


def test_topk1_draft_tokens_adjusted():
    v = _variant(steps=15, topk=1, ndt=10)
    argv = build_launch_argv(_plan(), v, 30000, "0.5.15")
    found = fl.check_spec_params(v, argv, "0.5.15", None)
    assert _codes(found) == ["draft-tokens-adjusted"] and "becomes 16" in found[0].what


def test_cuda_graphs_disabled_against_baseline():
    plan = _plan()
    base, weak = (
        _variant("base", algorithm=None, steps=None, topk=None, ndt=None, baseline=True),
        _variant("weak", steps=15, topk=1, ndt=16, cuda_graph=False),
    )
    base_argv, weak_argv = (build_launch_argv(plan, x, 1, "0.5.15") for x in (base, weak))
    found = fl.check_cuda_graphs(weak, weak_argv, base_argv, 4, None)
    assert [(f.severity, f.code) for f in found] == [("warning", "cuda-graph-disabled")]
    assert "baseline keeps its graphs" in found[0].why and "1.5-3x" in found[0].why
    via_extra = _variant("x", extra=["--cuda-graph-backend-decode", "disabled"])
    assert _codes(
        fl.check_cuda_graphs(via_extra, build_launch_argv(plan, via_extra, 1, "0.5.15"), base_argv, 4, None)
    ) == ["cuda-graph-disabled"]
    assert (
        fl.check_cuda_graphs(_variant(), build_launch_argv(plan, _variant(), 1, "0.5.15"), base_argv, 4, None)
        == []
    )


def test_cuda_graph_max_bs_below_batch():
    v = _variant()
    argv = build_launch_argv(_plan(cuda_graph_max_bs=8), v, 1, "0.5.15")
    assert _codes(fl.check_cuda_graphs(v, argv, None, 32, 8)) == ["cuda-graph-max-bs-low"]
    assert fl.check_cuda_graphs(v, argv, None, 8, 8) == []


def test_the_graph_cap_is_read_from_extra_args_where_the_plan_field_is_unset():
    """The H200 plans pass --cuda-graph-max-bs-decode 16 in extra_args, not server.cuda_graph_max_bs: without
    SGLang's parser to ask, the facts-table check read only the field and said nothing of batches to 64."""
    v = _variant("x", extra=["--cuda-graph-max-bs-decode", "16"])
    argv = build_launch_argv(_plan(), v, 1, "0.5.15")
    assert fl.graph_max_bs(argv, None) == 16
    assert fl.graph_max_bs([*argv, "--cuda-graph-max-bs=32"], 8) == 32  # the last spelling wins
    assert fl.graph_max_bs(["--port", "1"], 8) == 8 and fl.graph_max_bs([], None) is None
    found = fl.check_cuda_graphs(v, argv, None, 64, fl.graph_max_bs(argv, None))
    assert _codes(found) == ["cuda-graph-max-bs-low"] and "captured up to 16" in found[0].what


@pytest.mark.parametrize(
    "version,expected",
    [("0.4.8", False), ("0.5.5", True), ("0.5.10.post1", True), ("0.5.11", False), (None, False)],
)
def test_custom_aux_ids_with_graphs(version, expected):
    found = fl.check_aux_capture_bug("v", [1, 11, 21], 24, version, graphs_on=True)  # gpt-oss-20B's ids
    assert bool(found) is expected
    assert fl.check_aux_capture_bug("v", [1, 11, 20], 24, version, graphs_on=True) == []  # the defaults
    assert fl.check_aux_capture_bug("v", [1, 11, 21], 24, version, graphs_on=False) == []


def test_partial_left_to_the_real_parser():
    v = _variant(steps=None, topk=None, ndt=None, extra=["--speculative-eagle-topk", "2"])
    argv = build_launch_argv(_plan(), v, 30000, "0.5.15")
    assert fl.check_spec_params(v, argv, "0.5.15", None, tables=False) == []
    assert [f.code for f in fl.check_spec_params(v, argv, "0.5.15", None)] == ["spec-params-partial"]
