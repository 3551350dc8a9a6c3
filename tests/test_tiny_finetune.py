"""The H200 recipe's trainer (specforge_tiny) fine-tunes from a drafter with SpecForge's --ckpt-dir, as the
retrain loop asks it to (harness.retrain.loop_eval.train_fields): on the CPU, a micro target. Needs torch and
transformers (the `tiny-train` extra); skipped without them."""

from __future__ import annotations

import json
import re

from tests.test_tiny_eagle3 import MICRO, _target, _trainer, tinylm  # skips this module too without torch


def _losses(log: str) -> list[float]:
    return [float(x) for x in re.findall(r"position 0, pLoss: ([0-9.]+)", log)]


def test_fine_tuning_starts_from_the_given_drafter(tmp_path, capsys):
    tdir = _target(tmp_path)
    rows = [{"id": f"r{i}", "conversations": [{"role": "user", "content": f"x{i} = {i}"},
                                              {"role": "assistant", "content": f"print(x{i}) # {i * 3}"}]}
            for i in range(16)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "draft.json"
    cfg.write_text(json.dumps(tinylm.draft_config(MICRO, [0, 1, 2])))
    common = ["--target-model-path", str(tdir), "--train-data-path", str(data), "--num-epochs", "100",
              "--batch-size", "8", "--learning-rate", "5e-3", "--max-length", "256", "--ttt-length", "2",
              "--log-interval", "1"]
    assert _trainer().main([*common, "--output-dir", str(tmp_path / "a"), "--draft-model-config", str(cfg),
                            "--max-num-steps", "40"]) == 0
    scratch = capsys.readouterr().out
    base = tmp_path / "a" / "epoch_19_step_40"
    assert (base / "training_state.pt").is_file()
    assert _trainer().main([*common, "--output-dir", str(tmp_path / "b"), "--ckpt-dir", str(base),
                            "--max-num-steps", "2"]) == 0
    tuned = capsys.readouterr().out
    assert f"Finetuning from base model: {base}" in tuned
    # its first step is measured on the trained weights: the loss where the first run ended, not where it
    # began
    first, last = _losses(scratch)[0], _losses(scratch)[-1]
    assert last < first - 0.1, (first, last)
    assert abs(_losses(tuned)[0] - last) < abs(_losses(tuned)[0] - first), (first, last, _losses(tuned))
