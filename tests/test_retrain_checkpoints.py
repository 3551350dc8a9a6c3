"""Checkpoints -> drafters: discovery of every SpecForge layout, export, registration, preflight and the
one-action benchmark against the baseline on the stand-in."""

from __future__ import annotations

import os
import stat

import pytest

from harness.common import events as ev
from harness.common.errors import HarnessError, InputError
from harness.inputs.config import load_drafter
from harness.retrain.checkpoints import (
    CheckpointExported,
    CheckpointRegistered,
    PreflightDone,
    accept_len_across,
    build_export_argv,
    checkpoint_plan,
    discover_checkpoints,
    drafter_name,
    evaluate_checkpoint,
    export_checkpoint,
    parse_listing,
    preflight_drafter,
    register_checkpoint,
)
from harness.sim.sglang.fixtures import write_eagle3_drafter
from harness.targets.local import LocalTarget
from tests.retrain_helpers import write_plan

DEMO_DRAFT = {"target_hidden_size": 256, "hidden_size": 256, "vocab_size": 1024, "draft_vocab_size": 256}


def make_output_dir(root):
    out = root / "out dir"
    write_eagle3_drafter(out / "epoch_0_step_500", per_position=[0.5, 0.3])
    write_eagle3_drafter(out / "epoch_1_step_1000", per_position=[0.6, 0.4])
    (out / "epoch_1_step_1000" / "training_state.pt").write_bytes(b"x")
    write_eagle3_drafter(out / "epoch_2", per_position=[0.6, 0.4])  # v0.1.0
    for step in (800, 1600):
        (out / f"k25-step{step}").mkdir()
        (out / f"k25-step{step}" / "training_state.pt").write_bytes(b"x")
    os.symlink("k25-step1600", out / "k25-latest")
    os.symlink(str(out / "k25-step800"), out / "k25-best")
    (out / "k25.best_meta.json").write_text("{}")
    (out / "runs").mkdir()  # tensorboard
    (out / "epoch_x_step_y").mkdir()
    return out


async def test_discovers_every_layout(tmp_path):
    out = make_output_dir(tmp_path)
    found = await discover_checkpoints(LocalTarget(), str(out))
    assert [c.name for c in found] == [
        "k25-step800",
        "k25-step1600",
        "epoch_0_step_500",
        "epoch_1_step_1000",
        "epoch_2",
    ]
    by = {c.name: c for c in found}
    assert by["epoch_1_step_1000"].layout == "epoch_step" and (
        by["epoch_1_step_1000"].epoch,
        by["epoch_1_step_1000"].step,
    ) == (1, 1000)
    assert by["epoch_1_step_1000"].servable and by["epoch_1_step_1000"].has_training_state
    assert by["epoch_0_step_500"].servable and not by["epoch_0_step_500"].has_training_state
    assert by["epoch_2"].layout == "epoch" and by["epoch_2"].label == "e2"
    cli = by["k25-step1600"]
    assert (
        cli.layout == "run_step" and cli.run_id == "k25" and cli.needs_export and cli.aliases == ("latest",)
    )
    assert by["k25-step800"].aliases == ("best",) and cli.path == f"{out}/k25-step1600"
    assert await discover_checkpoints(LocalTarget(), str(tmp_path / "not yet")) == []


def test_parse_listing_ignores_noise():
    listing = "d\tcw\t1700000000\t\tepoch_3_step_9\nd\t\t0\t\truns\nf\tcw\t0\t\tepoch_4_step_1\nbroken line\n"
    (c,) = parse_listing(listing, "/o/")
    assert (c.path, c.epoch, c.step, c.mtime, c.label) == ("/o/epoch_3_step_9", 3, 9, 1.7e9, "e3-s9")
    assert parse_listing("MISSING\n", "/o") == []


def test_export_argv():
    argv = build_export_argv(
        "/o/k25-step800",
        draft_config="/cfg/draft.json",
        output_dir="/o/k25-step800-sglang",
        vocab_mapping="/cache/vocab.pt",
        python="/venv/bin/python",
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "specforge.cli",
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        "/o/k25-step800",
        "--draft-config",
        "/cfg/draft.json",
        "--output-dir",
        "/o/k25-step800-sglang",
        "--vocab-mapping",
        "/cache/vocab.pt",
    ]
    assert "--vocab-mapping" not in build_export_argv("c", draft_config="d", output_dir="o")


async def test_export_runs_on_the_target_and_checks_the_result(tmp_path):
    out = make_output_dir(tmp_path)
    ckpt = next(c for c in await discover_checkpoints(LocalTarget(), str(out)) if c.name == "k25-step800")
    fake = tmp_path / "python"  # a stand-in interpreter that does what `specforge export` prints
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --output-dir ] && o=$2; shift; done\n'
        'mkdir -p "$o" && echo "exported sglang draft to $o"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    exported = await export_checkpoint(LocalTarget(), ckpt, draft_config="cfg.json", python=str(fake))
    assert exported == f"{ckpt.path}-sglang" and os.path.isdir(exported)
    fake.write_text("#!/bin/sh\necho 'KeyError: d2t' >&2; exit 1\n")
    with pytest.raises(HarnessError, match="export of .*k25-step800 failed \\(exit 1\\): KeyError: d2t"):
        await export_checkpoint(LocalTarget(), ckpt, draft_config="cfg.json", python=str(fake))


async def test_register_writes_a_drafter_file_that_loads(tmp_path):
    out = make_output_dir(tmp_path)
    found = {c.name: c for c in await discover_checkpoints(LocalTarget(), str(out))}
    ckpt = found["epoch_1_step_1000"]
    name = drafter_name("k25-regen", ckpt)
    path = register_checkpoint(
        ckpt,
        name=name,
        drafters_dir=tmp_path / "drafters",
        trained_for="Kimi-K2.5",
        training_data="83k regenerated rows",
    )
    d = load_drafter(path)
    assert (d.name, d.path, d.algorithm, d.trained_for) == (
        "k25-regen-e1-s1000",
        ckpt.path,
        "EAGLE3",
        "Kimi-K2.5",
    )
    with pytest.raises(InputError, match="exists"):
        register_checkpoint(ckpt, name=name, drafters_dir=tmp_path / "drafters")
    assert register_checkpoint(ckpt, name=name, drafters_dir=tmp_path / "drafters", overwrite=True) == path
    with pytest.raises(HarnessError, match="specforge export --to sglang"):
        register_checkpoint(found["k25-step800"], name="x", drafters_dir=tmp_path / "drafters")
    with pytest.raises(InputError, match="not a valid drafter name"):
        register_checkpoint("/some/dir", name="../evil", drafters_dir=tmp_path / "drafters")


def test_checkpoint_plan_copies_the_speculative_settings(tmp_path):
    plan, _ = write_plan(tmp_path)
    path = register_checkpoint("ckpts/epoch_0_step_4", name="new", drafters_dir=tmp_path / "d")
    d = load_drafter(path)
    both = checkpoint_plan(plan, [d])
    assert [v.name for v in both.variants] == ["baseline", "seed", "new"]
    new = both.variant("new")
    assert (new.drafter.path, new.spec_algorithm, new.num_steps, new.eagle_topk, new.num_draft_tokens) == (
        "ckpts/epoch_0_step_4",
        "EAGLE3",
        3,
        1,
        4,
    )
    alone = checkpoint_plan(plan, [d.model_copy(update={"name": "seed"})], keep_existing=False)
    assert [v.name for v in alone.variants] == ["baseline", "seed"]
    clash = checkpoint_plan(plan, [d.model_copy(update={"name": "seed"})])
    assert [v.name for v in clash.variants] == ["baseline", "seed", "seed-new"]


async def test_preflight_flags_a_checkpoint_trained_for_another_target(tmp_path):
    plan, workdir = write_plan(tmp_path)
    write_eagle3_drafter(workdir / "ckpt" / "epoch_0_step_4", per_position=[0.9, 0.8, 0.7], **DEMO_DRAFT)
    write_eagle3_drafter(workdir / "ckpt" / "wrong", hidden_size=64, vocab_size=1024, draft_vocab_size=128)
    good = load_drafter(register_checkpoint("ckpt/epoch_0_step_4", name="good", drafters_dir=tmp_path / "d"))
    bad = load_drafter(register_checkpoint("ckpt/wrong", name="bad", drafters_dir=tmp_path / "d"))
    target = LocalTarget()
    assert not [f for f in await preflight_drafter(plan, good, target) if f.severity == "error"]
    errors = [f for f in await preflight_drafter(plan, bad, target) if f.severity == "error"]
    assert errors and {f.variant for f in errors} == {"bad"}


async def test_evaluate_checkpoint_and_accept_length_across_checkpoints(tmp_path):
    plan, workdir = write_plan(tmp_path)
    out = workdir / "outputs"
    write_eagle3_drafter(out / "epoch_0_step_4", per_position=[0.3, 0.1, 0.05], **DEMO_DRAFT)
    write_eagle3_drafter(out / "epoch_1_step_8", per_position=[0.9, 0.85, 0.8], **DEMO_DRAFT)
    early, late = await discover_checkpoints(LocalTarget(), str(out))
    drafters = tmp_path / "drafters"
    # an earlier checkpoint already in the plan next to the seed's drafter
    plan = checkpoint_plan(
        plan, [load_drafter(register_checkpoint(early, name="k25-e0-s4", drafters_dir=drafters))]
    )

    # the one action on the newest checkpoint: register, preflight, benchmark against the baseline
    seen = []
    async for e in evaluate_checkpoint(
        plan,
        late,
        name=drafter_name("k25", late),
        target=LocalTarget(),
        drafters_dir=drafters,
        results_dir=tmp_path / "results",
        trained_for="demo-models/target",
    ):
        seen.append(e)
    assert isinstance(seen[0], CheckpointRegistered) and seen[0].drafter.path == late.path
    assert load_drafter(seen[0].drafter_file).trained_for == "demo-models/target"
    assert isinstance(seen[1], PreflightDone) and seen[1].ok
    done = seen[-1]
    assert isinstance(done, ev.RunDone) and done.complete
    assert {e.variant for e in seen if isinstance(e, ev.VariantDone)} == {
        "baseline",
        "seed",
        "k25-e0-s4",
        "k25-e1-s8",
    }

    # accept length across checkpoints, next to the earlier drafter, in training order
    table = accept_len_across(done.run_dir)
    assert list(table["variant"]) == ["seed", "k25-e0-s4", "k25-e1-s8"]
    assert list(table["kind"]) == ["drafter", "checkpoint", "checkpoint"]
    assert list(table["step"].iloc[1:]) == [4, 8]
    first, last = table["accept_len"].iloc[1], table["accept_len"].iloc[2]
    assert last > first > 1.0  # the better-trained checkpoint accepts more


async def test_evaluate_stops_when_preflight_finds_errors(tmp_path):
    plan, workdir = write_plan(tmp_path)
    write_eagle3_drafter(
        workdir / "ckpt" / "epoch_0_step_4", hidden_size=64, vocab_size=1024, draft_vocab_size=128
    )
    seen = [
        e
        async for e in evaluate_checkpoint(
            plan,
            "ckpt/epoch_0_step_4",
            name="mismatch",
            target=LocalTarget(),
            drafters_dir=tmp_path / "d",
            results_dir=tmp_path / "results",
        )
    ]
    assert [type(e) for e in seen] == [CheckpointRegistered, PreflightDone] and not seen[1].ok
    assert not (tmp_path / "results").exists()  # nothing was started


async def test_evaluate_exports_a_cli_era_checkpoint_first(tmp_path):
    plan, workdir = write_plan(tmp_path)
    out = workdir / "outputs"
    (out / "k25-step800").mkdir(parents=True)
    (out / "k25-step800" / "training_state.pt").write_bytes(b"x")
    template = write_eagle3_drafter(tmp_path / "exported layout", per_position=[0.8, 0.6], **DEMO_DRAFT)
    fake = tmp_path / "python"  # the trainer's python, standing in for `python -m specforge.cli export`
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --output-dir ] && o=$2; shift; done\n'
        f'cp -r "{template}" "$o" && echo "exported sglang draft to $o"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (ckpt,) = await discover_checkpoints(LocalTarget(), str(out))
    with pytest.raises(InputError, match="must be exported for SGLang first"):
        async for _ in evaluate_checkpoint(plan, ckpt, name="k25-s800", target=LocalTarget()):
            pass
    events = evaluate_checkpoint(
        plan,
        ckpt,
        name="k25-s800",
        target=LocalTarget(),
        drafters_dir=tmp_path / "d",
        draft_config="configs/kimi-k25-eagle3.json",
        python=str(fake),
    )
    exported = await anext(events)
    assert isinstance(exported, CheckpointExported) and exported.exported == f"{ckpt.path}-sglang"
    registered = await anext(events)
    assert registered.drafter.path == exported.exported
    preflight = await anext(events)
    assert isinstance(preflight, PreflightDone) and preflight.ok
    await events.aclose()  # stop before the benchmark
