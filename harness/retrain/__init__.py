"""The retrain loop as core functions: regenerate training data with the target itself, train an EAGLE-3
drafter with SpecForge on the target, follow and control the job, and turn checkpoints into drafters.

| module | owns |
|---|---|
| `data.py` | SpecForge / ShareGPT conversation JSONL: reading (line-aware errors), writing, resume scan |
| `regen.py` | `regen(plan, input, output, ...)`: user turns replayed through the target (`RegenProgress`) |
| `regen_rows.py` | the row engine: endpoints, turn-by-turn replay, row errors vs connection faults |
| `train.py` | `TrainSpec`, SpecForge era detection, `build_train_argv` for the script and CLI eras |
| `progress.py` | parsers for every SpecForge progress line format, `ProgressState` |
| `jobs.py` | detached training jobs: launch, list, follow, cancel, resume |
| `checkpoint_dirs.py` | the checkpoint directories: layouts, discovery, `specforge export` |
| `checkpoints.py` | registration as a drafter, preflight + benchmark (`evaluate_checkpoint`), accept length |
| | across checkpoints |
| `fake_trainer.py` | a stand-in for `scripts/train_eagle3.py` used by tests and demos |

Nothing here imports torch or SpecForge: they live on the target and are only ever run there.
"""
