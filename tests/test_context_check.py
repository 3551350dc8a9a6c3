"""`check` reports, per suite, the requests that reach past the target's context or a drafter's trained
context, counting every turn of a live conversation with the earlier turns and answers it carries."""

from __future__ import annotations

from harness.checks import run_checks
from harness.checks.context import target_context, turn_tokens
from harness.cli.demo import prepare_demo
from harness.inputs.config import Plan
from harness.inputs.suites import Prompt, Suite
from harness.targets.local import LocalTarget


def test_turns_grow_with_the_earlier_turns_and_answers():
    p = Prompt(id="c", text="x" * 400, followups=["y" * 40, "z" * 4])
    assert turn_tokens(p, 100) == [100 + 16 + 100, 110 + 32 + 200, 111 + 48 + 300]


def test_the_context_length_flag_wins_over_the_checkpoint():
    plan = Plan.model_validate({
        "name": "ctx", "model": {"path": "m", "extra_args": ["--context-length", "4096"]},
        "variants": [{"name": "base"}], "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})
    assert target_context(plan, {"max_position_embeddings": 8192}) == 4096
    plan.model.extra_args = []
    assert target_context(plan, {"text_config": {"max_position_embeddings": 8192}}) == 8192


async def test_check_reports_long_requests_per_suite(tmp_path):
    plan = prepare_demo(tmp_path)  # target context 8192, drafters trained to 2048
    plan.run.max_tokens = 128
    plan.suites = [
        Suite(name="short", prompts=[Prompt(id="a", text="hello")]),
        # turn 1 ~1000 tokens fits both; turn 2 carries turn 1 and its answer past 2048; turn 3 past 8192
        Suite(name="mt", prompts=[Prompt(id="long", text="w" * 3500, followups=["v" * 4500, "u" * 24000]),
                                  Prompt(id="ok", text="fine")]),
    ]
    findings = await run_checks(plan, LocalTarget())
    target = [f for f in findings if f.code == "context-target"]
    assert len(target) == 1 and target[0].severity == "error"
    assert target[0].what.startswith(
        "suite mt: 1 of 4 requests reach past the target's context of 8192 tokens")
    assert "mt/long turn 3" in target[0].what
    drafter = [f for f in findings if f.code == "max-position" and f.variant == "good-eagle3"]
    assert [f.what.split(" (")[0] for f in drafter] == [
        "suite mt: 2 of 4 requests go past the drafter's max_position_embeddings 2048"]


async def test_check_warns_of_phases_too_small_to_decide(tmp_path):
    from harness.checks.measurement import phase_findings

    plan = prepare_demo(tmp_path)  # run.concurrency [1, 4]
    plan.run.phase_sizing = False  # on (the default), the suite is cycled until the phase decides: no warning
    plan.suites = [
        # 3 prompts, one a 3-turn conversation: 5 requests per phase, under 4 x 4 but not under 4 x 1
        Suite(name="few", prompts=[Prompt(id="a", text="a"), Prompt(id="b", text="b"),
                                   Prompt(id="mt", text="c", followups=["d", "e"])]),
        Suite(name="enough", prompts=[Prompt(id=f"p{i}", text="x") for i in range(16)]),
    ]
    found = [f for f in await run_checks(plan, LocalTarget()) if f.code == "phase-too-short"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert found[0].what == "suite few: 5 requests per phase, fewer than 4 x concurrency at concurrency 4"
    assert "at least 16 requests" in found[0].fix
    plan.run.concurrency = [1, 8, 16]
    assert [f.what for f in phase_findings(plan)] == [
        "suite few: 5 requests per phase, fewer than 4 x concurrency at concurrency 8, 16",
        "suite enough: 16 requests per phase, fewer than 4 x concurrency at concurrency 8, 16"]
    plan.run.phase_sizing = True
    assert phase_findings(plan) == []
    # run.requests_per_slot sets every phase's count whatever the suite holds: 4 x concurrency decides
    plan.run.requests_per_slot = 4
    assert phase_findings(plan) == []
    plan.run.requests_per_slot = 2
    assert [f.what for f in phase_findings(plan)] == [
        "run.requests_per_slot is 2: every phase has fewer than 4 x concurrency requests"]
    plan.run.phase_sizing, plan.run.requests_per_slot = False, None
    plan.variants = [v for v in plan.variants if not v.is_speculative]  # a baseline alone has no verdict
    assert phase_findings(plan) == []
