"""vLLM's engine package: log lines from vLLM's own format strings (tests/fixtures/vllm), /metrics deltas,
the `vllm serve` argv, per-request stats and the preflight rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.engines.base import DrafterCheck, LaunchCheck
from harness.engines.vllm import launch, metrics, spec
from harness.engines.vllm.logline import parse_line
from harness.engines.vllm.preflight import drafter_findings, launch_findings
from harness.inputs.config import Plan

FIX = Path(__file__).parent / "fixtures" / "vllm"


def _lines() -> dict[str, str]:
    """The fixture's lines keyed by the comment above each."""
    out, tag = {}, ""
    for ln in (FIX / "log_lines.txt").read_text().splitlines():
        if ln.startswith("#"):
            tag = ln[2:].split(":")[0].split(" (")[0]
        elif ln:
            out[tag] = ln
    return out


def test_current_spec_line():
    w = parse_line(_lines()["0.11.0 .. 0.33.0"], 7)
    assert w.kind == "decode" and w.line == 7 and w.time == "12-01 10:00:10" and w.ranks == "APIServer"
    assert w.accept_len == pytest.approx(2.77) and w.accept_rate == pytest.approx(0.589)
    extra = dict(w.extra)
    assert extra["accepted_tokens"] == "626" and extra["drafted_tokens"] == "1062"
    assert extra["per_position"] == "0.802 0.551 0.415"


def test_older_spec_lines_mean_the_same_accept_length():
    lines = _lines()
    new = parse_line(lines["0.9.0 .. 0.10.x"], 1)
    old = parse_line(lines["0.8.5"], 1)  # printed accepted/drafts: the bonus token is added back
    assert new.accept_len == pytest.approx(2.77) and old.accept_len == pytest.approx(2.77)
    first = parse_line(lines["0.8.0 .. 0.8.4"], 1)
    assert first.accept_len is None and first.accept_rate == pytest.approx(0.589)


def test_v0_line_is_cumulative_and_gives_no_window_accept_length():
    w = parse_line(_lines()["v0 engine"], 1)
    assert w.kind == "decode" and w.accept_len is None and w.accept_rate == pytest.approx(0.589)
    assert dict(w.extra)["cumulative"] == "true" and dict(w.extra)["emitted_tokens"] == "980"


def test_engine_stats_line():
    w = parse_line(_lines()["0.33.0"], 3)
    assert (w.kind, w.running_req, w.queue_req, w.ranks) == ("stats", 4, 1, "Engine 000")
    assert w.gen_throughput == pytest.approx(173.0) and w.input_throughput == pytest.approx(93.9)
    assert w.token_usage == pytest.approx(0.025)


@pytest.mark.parametrize("cut", [40, 120, 200])
def test_cut_lines_are_rejected(cut):
    assert parse_line(_lines()["0.11.0 .. 0.33.0"][:cut], 1) is None


def test_metrics_delta_over_a_phase():
    before = metrics.parse_metrics((FIX / "metrics-before.txt").read_text())
    after = metrics.parse_metrics((FIX / "metrics-after.txt").read_text())
    # _created ignored
    assert before.counters == {"drafts": 1000.0, "draft_tokens": 3000.0, "accepted": 1500.0}
    row = metrics.phase_means(before, after)
    assert row["server_spec_drafts"] == 200 and row["server_spec_accepted_tokens"] == 350
    assert row["server_accept_len"] == pytest.approx(1 + 350 / 200)  # not the lifetime 1 + 1850/1200
    assert row["server_accept_per_pos"] == "0.8000 0.5500 0.4000"
    assert row["server_requests"] == 4 and row["server_e2e_ms_mean"] == pytest.approx(2000.0)
    assert row["server_ttft_ms_mean"] == pytest.approx(50.0)
    assert metrics.phase_means(after, before)["server_accept_len"] is None  # counters went down: a restart
    assert metrics.phase_means(None, after)["server_accept_len"] is None


def _plan(**variant) -> Plan:
    return Plan.model_validate({
        "name": "p", "engine": "vllm",
        "target": {"vllm_launcher": ["{python}", "-m", "vllm.entrypoints.cli.main", "serve"],
                   "python": "/opt/py"},
        "model": {"path": "/m/Llama 3", "tp_size": 2, "served_model_name": "llama"},
        "server": {"cuda_graph_max_bs": 64},
        "variants": [{"name": "base"}, {"name": "spec", **variant}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})


def test_launch_argv():
    plan = _plan(drafter={"name": "d", "path": "/heads/eagle3 x"}, num_steps=3, eagle_topk=1,
                 num_draft_tokens=4, cuda_graph=False)
    argv = launch.build_launch_argv(plan, plan.variant("spec"), 8123, "0.33.0")
    assert argv[:5] == ["/opt/py", "-m", "vllm.entrypoints.cli.main", "serve", "/m/Llama 3"]
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-num-seqs") + 1] == "32" and "--enforce-eager" in argv
    assert argv[argv.index("--served-model-name") + 1] == "llama"
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])  # one argv item, valid JSON
    assert cfg == {"method": "eagle3", "model": "/heads/eagle3 x", "num_speculative_tokens": 3}
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    old = launch.build_launch_argv(plan, plan.variant("spec"), 8123, "0.20.0")
    assert "--per-request-spec-decode-metrics" not in old and "--max-cudagraph-capture-size" not in old
    base = launch.build_launch_argv(plan, plan.variant("base"), 8123, "0.33.0")
    assert "--speculative-config" not in base and "--enforce-eager" not in base
    eagle1 = _plan(drafter={"name": "d", "path": "/h", "algorithm": "EAGLE"})
    argv = launch.build_launch_argv(eagle1, eagle1.variant("spec"), 1, None)
    assert json.loads(argv[-3])["method"] == "eagle"


def test_request_spec_from_vllm_docs_example():
    # the `summary` example of docs/features/speculative_decoding/acceptance_metrics.md
    doc = {"mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
           "acceptance_histogram": [39, 1, 0, 3],
           "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]}, "num_spec_steps": 43,
           "num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3}
    r = spec.request_spec(doc, None)
    assert r["spec_verify_ct"] == 43 and r["spec_accept_len"] == pytest.approx(doc["mean_acceptance_length"])
    assert r["spec_correct_drafts"] == 10 and r["spec_proposed_drafts"] == 129
    assert r["spec_histogram"] == "39 1 0 3"
    assert spec.request_spec(doc, 54)["spec_accept_len"] == pytest.approx(53 / 43)  # (completion - 1) / steps


def test_launch_findings():
    plan = _plan(drafter={"name": "d", "path": "/h"}, num_steps=3, eagle_topk=4, num_draft_tokens=8)
    v = plan.variant("spec")
    codes = {f.code for f in launch_findings(LaunchCheck(plan, v, [], None, None, "0.28.0", None, 32))}
    assert {"vllm-chain-only", "vllm-no-per-request"} <= codes


ARGV = ["--speculative-config", json.dumps({"method": "eagle3", "model": "/h", "num_speculative_tokens": 3})]


@pytest.mark.parametrize("nested, top, codes", [
    ([1, 15, 28], None, set()),  # SGLang ids whose +1 is vLLM's default (2, 16, 29): the fallback matches
    ([3, 20, 30], None, {"vllm-aux-ignored"}),  # the #50170 failure: vLLM never reads eagle_config's ids
    (None, None, {"vllm-aux-default"}),
    (None, [2, 16, 29], set()),
    ([1, 15, 28], [2, 16, 32], {"vllm-aux-range", "vllm-aux-disagree"}),
    (None, [0, 16, 29], {"vllm-aux-range"}),
])
def test_aux_layer_findings(nested, top, codes):
    cfg = {"eagle_aux_hidden_state_layer_ids": top} if top is not None else {}
    assert {f.code for f in drafter_findings(DrafterCheck("v", ARGV, cfg, nested, 32, "0.33.0"))} == codes


def test_aux_findings_only_for_eagle3():
    eagle = ["--speculative-config", json.dumps({"method": "eagle", "model": "/h"})]
    assert drafter_findings(DrafterCheck("v", eagle, {}, [3, 20, 30], 32, "0.33.0")) == []


async def test_run_checks_on_a_plan_with_both_engines(tmp_path):
    """run_checks asks each engine about its own variants: the SpecForge-layout head (ids under eagle_config,
    not vLLM's default layers) is an error for the vLLM arm only; shapes and context checks run for both."""
    import sys

    from harness.checks import run_checks
    from harness.targets.local import LocalTarget
    from tests.checks_helpers import load, write_models, write_plan

    workdir = write_models(tmp_path / "work", aux_layer_ids=[0, 1, 2])
    spec = {"drafter": "draft.yaml", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
            "num_draft_tokens": 4}
    plan = load(write_plan(tmp_path / "plan", workdir, [
        {"name": "sgl-base"}, {"name": "sgl-eagle3", **spec},
        {"name": "vllm-base", "engine": "vllm"}, {"name": "vllm-eagle3", "engine": "vllm", **spec}],
        target={"simulated": True, "launcher": ["{python}", "-m", "harness.sim"],
                "vllm_launcher": [sys.executable, "-m", "harness.sim.vllm", "serve"]}))
    findings = await run_checks(plan, LocalTarget())
    codes = {(f.variant, f.code) for f in findings if f.severity == "error"}
    assert ("vllm-eagle3", "vllm-aux-ignored") in codes
    assert not any(v == "sgl-eagle3" and c.startswith("vllm") for v, c in codes)
    assert not any(f.variant == "vllm-eagle3" and f.code == "argv" for f in findings)


async def test_a_vllm_arm_is_never_judged_by_sglang_release_rules(tmp_path):
    """Issue 28: the checkpoint checks compared a vLLM arm's vLLM version with SGLang's 0.5.12 limits (one
    layer, three aux layers), quiet only while vLLM's version number was above 0.5.12. vLLM 0.5.0 is a real
    vLLM release: its arm gets no SGLang finding, while the same head on an SGLang arm pinned to 0.5.0
    does."""
    from harness.checks import run_checks
    from harness.targets.local import LocalTarget
    from tests.checks_helpers import load, write_models, write_plan

    workdir = write_models(tmp_path / "work", num_layers=2, aux_layer_ids=[1, 5, 9, 13])
    spec = {"drafter": "draft.yaml", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
            "num_draft_tokens": 4}
    plan = load(write_plan(tmp_path / "plan", workdir, [
        {"name": "sgl-base"}, {"name": "sgl-eagle3", **spec},
        {"name": "vllm-base", "engine": "vllm"}, {"name": "vllm-eagle3", "engine": "vllm", **spec}],
        target={"sglang_version": "0.5.0", "vllm_version": "0.5.0"}))  # the old keys: they load as before
    findings = await run_checks(plan, LocalTarget())
    release = {"draft-layers", "aux-layer-count"}
    assert {f.code for f in findings if f.variant == "sgl-eagle3"} >= release
    assert not {f.code for f in findings if f.variant == "vllm-eagle3"} & release
