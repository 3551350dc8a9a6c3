"""Sampling and reasoning as an axis (run.sampling): one variant per arm, each paired with the baseline at its
own sampler; the arm's fields on every request; the model's recommended sampler as a suggestion."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness.analysis.engines_table import own_baseline
from harness.bench.sampling_client import SamplingClient, any_greedy, with_sampling
from harness.common.errors import InputError
from harness.inputs.config import Plan, load_plan
from harness.inputs.sampling import SamplingArm, suggested_arm

ARMS = [{"temperature": 0}, {"temperature": 0.7, "top_p": 0.95}, {"temperature": 0.6, "thinking": True}]


def _plan(tmp_path: Path, run: dict[str, Any], variants: list[dict] | None = None) -> Path:
    data = {"name": "t", "target": {"simulated": True}, "model": {"path": "m"},
            "variants": variants or [{"name": "baseline"},
                                     {"name": "eagle", "drafter": {"name": "d", "path": "d"}}],
            "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hello there"}]}],
            "run": run}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_every_variant_is_measured_at_every_arm_against_the_baseline_at_the_same(tmp_path):
    plan = load_plan(_plan(tmp_path, {"sampling": ARMS}))
    names = [v.name for v in plan.variants]
    assert names == ["baseline-t0", "baseline-t0.7-p0.95", "baseline-t0.6-think",
                     "eagle-t0", "eagle-t0.7-p0.95", "eagle-t0.6-think"]
    for arm in ("t0", "t0.7-p0.95", "t0.6-think"):
        assert plan.baseline_of(plan.variant(f"eagle-{arm}")).name == f"baseline-{arm}"
    # plan.resolved.json reads back as the same plan: the arms are not expanded twice
    again = Plan.model_validate(plan.resolved_dict())
    assert [v.name for v in again.variants] == names
    assert again.variant("eagle-t0.6-think").sampling.request_fields() == {
        "temperature": 0.6, "chat_template_kwargs": {"enable_thinking": True}}


def test_an_arm_named_twice_or_a_temperature_beside_the_arms_is_refused_with_its_line(tmp_path):
    with pytest.raises(InputError) as exc:
        load_plan(_plan(tmp_path, {"sampling": [{"temperature": 0.5}, {"temperature": 0.5}]}))
    assert "run.sampling[1]" in str(exc.value) and "listed twice" in str(exc.value)
    assert exc.value.line is not None
    with pytest.raises(InputError) as exc:
        load_plan(_plan(tmp_path, {"temperature": 0.8, "sampling": [{"temperature": 0.5}]}))
    assert "run.temperature" in str(exc.value) and "each arm its own temperature" in str(exc.value)
    with pytest.raises(InputError, match="name the arm"):  # a name the expansion makes twice
        load_plan(_plan(tmp_path, {"sampling": [{"temperature": 0}]},
                        [{"name": "baseline"}, {"name": "eagle", "drafter": {"name": "d", "path": "d"}},
                         {"name": "eagle-t0", "sampling": {"temperature": 0},
                          "drafter": {"name": "d", "path": "d"}}]))


def test_arm_labels_and_the_models_own_sampler():
    assert SamplingArm(temperature=0.7, top_p=0.95, thinking=False).label == "t0.7-p0.95-nothink"
    assert SamplingArm(temperature=1, name="hot").label == "hot"
    assert suggested_arm({"do_sample": True, "temperature": 0.6, "top_p": 0.95}).label == "t0.6-p0.95"
    assert suggested_arm({"temperature": 0.6, "top_p": 1.0}).label == "t0.6"
    assert suggested_arm({"do_sample": False, "temperature": 0.6}) is None
    assert suggested_arm({}) is None and suggested_arm(None) is None


@dataclass(frozen=True)
class _Req:
    request_id: str
    temperature: float
    extra_body: dict | None


class _Client:
    def __init__(self) -> None:
        self.sent: list[_Req] = []
        self.endpoint = "chat"

    async def stream(self, req: _Req) -> str:
        self.sent.append(req)
        return "ok"


def test_the_arm_goes_on_every_request_over_the_defaults(tmp_path):
    plan = load_plan(_plan(tmp_path, {"sampling": ARMS}))
    inner = _Client()
    client = with_sampling(inner, plan.variant("eagle-t0.7-p0.95"))
    assert isinstance(client, SamplingClient) and client.endpoint == "chat"
    asyncio.run(client.stream(_Req("r", 0.0, {"return_spec_tokens_details": True})))
    sent = inner.sent[0]
    assert sent.temperature == 0.7
    assert sent.extra_body == {"return_spec_tokens_details": True, "temperature": 0.7, "top_p": 0.95}
    assert with_sampling(inner, load_plan(_plan(tmp_path, {})).variants[1]) is inner  # no arms: as it was
    assert any_greedy(plan) and not any_greedy(load_plan(_plan(tmp_path, {"sampling": [{"temperature": 1}]})))


def test_a_row_is_compared_with_the_baseline_at_its_own_sampler():
    base = pd.DataFrame([{"variant": "b-t0", "concurrency": 1, "engine": "sglang", "sampling": "t0"},
                         {"variant": "b-t1", "concurrency": 1, "engine": "sglang", "sampling": "t1"}])
    row = pd.Series({"variant": "e-t1", "concurrency": 1, "engine": "sglang", "sampling": "t1"})
    assert list(own_baseline(base, row)["variant"]) == ["b-t1"]


def test_breakeven_pairs_a_forced_arm_with_the_baseline_at_its_sampler(tmp_path):
    from harness.studies.breakeven import derive_plan

    plan = load_plan(_plan(tmp_path, {"sampling": ARMS[:2]}))
    derived = derive_plan(plan, "eagle-t0.7-p0.95", [1.5, 2.5])
    assert derived.variants[0].name == "baseline-t0.7-p0.95"
    assert {v.sampling.label for v in derived.variants} == {"t0.7-p0.95"}


def test_tune_measures_the_first_arm_and_says_so_for_another(tmp_path):
    from harness.studies.tune import TuneOptions, _Tune

    plan = load_plan(_plan(tmp_path, {"sampling": ARMS[:2]}))
    with pytest.raises(InputError, match="tune measures the first arm"):
        _Tune(plan, TuneOptions(variant="eagle-t0.7-p0.95"), tmp_path / "results", None, None, lambda: 0.0)


def test_thinking_on_the_completions_endpoint_is_refused_with_its_line(tmp_path):
    # raw text goes through no chat template: enable_thinking would switch nothing, the arm measure nothing
    with pytest.raises(InputError) as exc:
        load_plan(_plan(tmp_path, {"endpoint": "completions", "sampling": ARMS}))
    assert exc.value.field == "run.sampling[2].thinking" and "run.endpoint: chat" in exc.value.message
    assert exc.value.line is not None
    assert load_plan(_plan(tmp_path, {"endpoint": "completions", "sampling": ARMS[:2]})).variants


async def test_a_thinking_arm_goes_on_the_wire_as_chat_template_kwargs(tmp_path):
    """The real replay client, wrapped for a thinking-off arm, against a server that records each body."""
    from harness.client.stream import ReplayClient, ReplayRequest
    from tests.test_client import script_server, spec_stream, sse

    arms = [{"temperature": 0}, {"temperature": 0.6, "top_p": 0.95, "thinking": False}]
    plan = load_plan(_plan(tmp_path, {"sampling": arms}))
    async with script_server() as srv:
        srv.scripts = [sse(spec_stream([1, 2]))]
        inner = ReplayClient(srv.url, "default", timeout_s=30)
        try:
            client = with_sampling(inner, plan.variant("eagle-t0.6-p0.95-nothink"))
            got = await client.stream(ReplayRequest("r", [{"role": "user", "content": "hi"}], None, 8,
                                                    extra_body={"return_spec_tokens_details": True}))
            assert got.ok and got.output_tokens == 3
            await with_sampling(inner, plan.variant("eagle-t0")).stream(
                ReplayRequest("g", [{"role": "user", "content": "hi"}], None, 8))
        finally:
            await inner.aclose()
    (_, think, _), (_, greedy, _) = srv.requests
    assert think["chat_template_kwargs"] == {"enable_thinking": False}
    assert (think["temperature"], think["top_p"], think["return_spec_tokens_details"]) == (0.6, 0.95, True)
    assert greedy["temperature"] == 0.0 and "chat_template_kwargs" not in greedy and "top_p" not in greedy


def test_only_greedy_arms_are_audited_each_against_the_baseline_at_its_arm(tmp_path):
    from harness.bench import audit

    plan = load_plan(_plan(tmp_path, {"sampling": ARMS[:2]}))
    assert audit.wanted(plan)
    assert [v.name for v in plan.variants if audit.greedy(plan, v)] == ["baseline-t0", "eagle-t0"]
    assert audit.baseline_for(plan, plan.variant("eagle-t0")) == "baseline-t0"
    assert audit.baseline_for(plan, plan.variant("eagle-t0.7-p0.95")) == "baseline-t0.7-p0.95"
    # sampled arms only: nothing to audit (their answers differ from the baseline's by design)
    assert not audit.wanted(load_plan(_plan(tmp_path, {"sampling": [{"temperature": 0.7}]})))


def test_a_later_look_reruns_only_the_baselines_of_rows_still_open(tmp_path):
    from harness.bench.decide import rerun_levels

    plan = load_plan(_plan(tmp_path, {"sampling": ARMS[:2], "concurrency": [1, 8]}))
    open_rows = [("eagle-t0.7-p0.95", 8)]  # eagle-t0 decided at both levels, the sampled arm at c1
    got = {v.name: rerun_levels(plan, v, open_rows) for v in plan.variants}
    assert got == {"baseline-t0": set(), "baseline-t0.7-p0.95": {8},
                   "eagle-t0": set(), "eagle-t0.7-p0.95": {8}}
