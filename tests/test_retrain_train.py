"""SpecForge command lines for each era, era detection, and the CLI era's generated config."""

from __future__ import annotations

import sys

import pytest
import yaml

from harness.common.errors import HarnessError, InputError
from harness.retrain.train import (
    PROBE_SH,
    TrainSpec,
    build_train_argv,
    cli_config,
    cli_config_yaml,
    detect_era,
    era_from_probe,
    parse_gpus,
    spec_from_plan,
)
from harness.targets.local import LocalTarget

BASE = {
    "target_model_path": "/models/Kimi-K2.5",
    "data_path": "data/regen.jsonl",
    "output_dir": "out/k25",
    "specforge_dir": "/opt/SpecForge",
}


def spec(**kw):
    return TrainSpec.model_validate({**BASE, **kw})


def flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_script_era_argv():
    s = spec(
        epochs=3,
        learning_rate=5e-5,
        max_length=4096,
        ttt_length=6,
        chat_template="kimi-k2-instruct",
        tp_size=8,
        gpus=8,
        save_interval=2000,
        log_interval=10,
        report_to="tensorboard",
        python="/venv/bin/python",
    )
    argv = build_train_argv(s, "script", workdir="/work")
    assert argv[:7] == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "8",
        "/opt/SpecForge/scripts/train_eagle3.py",
    ]
    f = flags(argv)
    assert f["--target-model-path"] == "/models/Kimi-K2.5" and f["--train-data-path"] == "data/regen.jsonl"
    assert f["--output-dir"] == "out/k25" and f["--num-epochs"] == "3" and f["--learning-rate"] == "5e-05"
    assert (
        f["--max-length"] == "4096"
        and f["--ttt-length"] == "6"
        and f["--chat-template"] == "kimi-k2-instruct"
    )
    assert f["--tp-size"] == "8" and f["--save-interval"] == "2000" and f["--log-interval"] == "10"
    assert f["--report-to"] == "tensorboard" and "--resume" not in f and "--draft-model-config" not in f
    resumed = build_train_argv(s, "script", workdir="/work", resume=True)
    assert resumed == argv + ["--resume"]


def test_relative_checkout_gpu_ids_and_extra_args():
    s = spec(specforge_dir="SpecForge", gpus=[2, 3], extra_args=["--attention-backend", "sdpa"])
    argv = build_train_argv(s, "script", workdir="/home/u/draftbench")
    assert argv[5:7] == ["2", "/home/u/draftbench/SpecForge/scripts/train_eagle3.py"]
    assert argv[-2:] == ["--attention-backend", "sdpa"]
    assert s.trainer_env() == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_v010_script_needs_a_draft_config_and_has_no_ttt_length():
    with pytest.raises(InputError, match="draft-model-config"):
        build_train_argv(spec(), "script-v0.1", workdir="/w")
    argv = build_train_argv(
        spec(draft_model_config="configs/llama3-8B-eagle3.json", log_interval=5, report_to="wandb"),
        "script-v0.1",
        workdir="/w",
    )
    assert argv[6] == "/opt/SpecForge/scripts/train_eagle3_online.py"
    f = flags(argv)
    assert f["--draft-model-config"] == "configs/llama3-8B-eagle3.json"
    assert "--ttt-length" not in f and "--log-interval" not in f and "--report-to" not in f


def test_launcher_replaces_torchrun_and_script():
    argv = build_train_argv(
        spec(launcher=["{python}", "-m", "harness.retrain.fake_trainer"], python="py3"),
        "script",
        workdir="/w",
    )
    assert argv[:3] == ["py3", "-m", "harness.retrain.fake_trainer"] and argv[3] == "--target-model-path"


def test_tp_must_divide_the_gpus():
    with pytest.raises(InputError, match="does not divide"):
        build_train_argv(spec(tp_size=4, gpus=6), "script", workdir="/w")


def test_cli_era_argv_and_resume():
    s = spec()
    argv = build_train_argv(s, "cli", workdir="/w", config_path="/w/jobs/j/specforge.yaml")
    assert argv == ["python3", "-m", "specforge.cli", "train", "--config", "/w/jobs/j/specforge.yaml"]
    resumed = build_train_argv(
        s,
        "cli",
        workdir="/w",
        config_path="/w/jobs/j/specforge.yaml",
        resume=True,
        resume_from="/w/out/k25/j-step800",
    )
    assert resumed[-1] == "training.resume_from=/w/out/k25/j-step800"
    with pytest.raises(HarnessError, match="nothing to resume"):
        build_train_argv(s, "cli", workdir="/w", config_path="c.yaml", resume=True)


def test_cli_config_overrides_a_base_recipe():
    base = {
        "model": {"target_backend": "sglang", "target_model_path": "old"},
        "deployment": {"mode": "disaggregated", "disaggregated": {"backend": "mooncake"}},
        "training": {"attention_backend": "sdpa", "num_epochs": 99},
    }
    s = spec(
        base_config=base,
        tp_size=8,
        gpus=8,
        epochs=2,
        max_steps=5000,
        save_interval=500,
        report_to="tensorboard",
    )
    cfg = cli_config(s, run_id="k25-regen")
    assert cfg["run_id"] == "k25-regen" and cfg["output_dir"] == "out/k25"
    assert cfg["model"] == {"target_backend": "sglang", "target_model_path": "/models/Kimi-K2.5"}
    assert cfg["training"]["attention_backend"] == "sdpa" and cfg["training"]["num_epochs"] == 2
    assert cfg["training"]["max_steps"] == 5000 and cfg["training"]["strategy"] == "eagle3"
    assert (
        cfg["deployment"]["mode"] == "disaggregated" and cfg["deployment"]["trainer"]["nproc_per_node"] == 8
    )
    assert cfg["tracking"] == {"report_to": "tensorboard"}
    assert yaml.safe_load(cli_config_yaml(s, run_id="k25-regen")) == cfg


def test_cli_config_without_recipe():
    cfg = cli_config(spec(), run_id="r")
    assert cfg["deployment"] == {"trainer": {"nnodes": 1, "nproc_per_node": 1}, "mode": "local_colocated"}
    assert cfg["data"] == {
        "train_data_path": "data/regen.jsonl",
        "max_length": 2048,
        "chat_template": "llama3",
    }
    with pytest.raises(InputError, match="capture servers"):
        cli_config(spec(tp_size=2, gpus=2), run_id="r")


@pytest.mark.parametrize(
    "probe, era",
    [
        ("cli-bin cli-module module torch script", "script"),  # a checkout with the script wins
        ("module torch script-v0.1", "script-v0.1"),
        ("cli-bin cli-module module torch", "cli"),
        ("cli-module module", "cli"),
    ],
)
def test_era_from_probe(probe, era):
    assert era_from_probe(probe, specforge_dir="/opt/SpecForge") == era


def test_era_from_probe_explains_what_is_missing():
    with pytest.raises(
        HarnessError, match="no scripts/train_eagle3.py under /opt/sf.*importable but has no CLI"
    ):
        era_from_probe("module torch", specforge_dir="/opt/sf")
    with pytest.raises(HarnessError, match="no SpecForge checkout given"):
        era_from_probe("", specforge_dir=None)


async def test_detect_era_runs_the_probe_on_the_target(tmp_path):
    (tmp_path / "sf" / "scripts").mkdir(parents=True)
    target = LocalTarget()
    s = spec(specforge_dir="sf", python=sys.executable)
    with pytest.raises(HarnessError, match="SpecForge not found"):
        await detect_era(target, s, workdir=str(tmp_path))
    (tmp_path / "sf" / "scripts" / "train_eagle3_online.py").write_text("")
    assert await detect_era(target, s, workdir=str(tmp_path)) == "script-v0.1"
    (tmp_path / "sf" / "scripts" / "train_eagle3.py").write_text("")
    assert await detect_era(target, s, workdir=str(tmp_path)) == "script"
    assert await detect_era(target, spec(era="cli"), workdir=str(tmp_path)) == "cli"
    assert "specforge.cli" in PROBE_SH


def test_gpus_option_and_validation():
    assert parse_gpus("4") == 4 and parse_gpus("0,1, 3") == [0, 1, 3]
    with pytest.raises(InputError, match="gpus"):
        parse_gpus("all")
    with pytest.raises(ValueError, match="distinct GPU ids"):
        spec(gpus=[1, 1])
    with pytest.raises(ValueError, match="extra"):
        TrainSpec.model_validate({**BASE, "epoch": 3})  # a typo is an error, not ignored


def test_spec_from_plan_takes_the_target_model_and_python(tmp_path):
    from tests.retrain_helpers import write_plan

    plan, _ = write_plan(tmp_path)
    s = spec_from_plan(plan, data_path="regen.jsonl", output_dir="out", epochs=2, learning_rate=None)
    assert (s.target_model_path, s.python, s.epochs, s.learning_rate) == (
        "demo-models/target",
        sys.executable,
        2,
        1e-4,
    )
    with pytest.raises(ValueError, match="data_path"):
        spec_from_plan(plan, output_dir="out")


def test_training_across_nodes_uses_torchruns_static_rendezvous():
    s = spec(gpus=8, tp_size=8, nnodes=2, node_rank=1, master_addr="10.0.0.5", master_port=29600)
    argv = build_train_argv(s, "script", workdir="/work")
    head = argv[:argv.index("/opt/SpecForge/scripts/train_eagle3.py")]
    assert "--standalone" not in head
    assert flags(head) == {"--nnodes": "2", "--node_rank": "1", "--master_addr": "10.0.0.5",
                           "--master_port": "29600", "--nproc_per_node": "8"}
    assert s.world_size == 16
    with pytest.raises(InputError, match="rank 0's address"):
        build_train_argv(spec(nnodes=2), "script", workdir="/w")
    with pytest.raises(InputError, match="not below nnodes"):
        build_train_argv(spec(nnodes=2, node_rank=2, master_addr="h"), "script", workdir="/w")
    # one node stays standalone; the CLI era's deployment names the node count
    assert "--standalone" in build_train_argv(spec(gpus=4), "script", workdir="/w")
    from harness.retrain.train import cli_config

    config = cli_config(spec(gpus=4, nnodes=3, node_rank=0, master_addr="h"), run_id="r")
    assert config["deployment"]["trainer"] == {"nnodes": 3, "nproc_per_node": 4}
