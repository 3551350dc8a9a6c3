"""A stand-in for SpecForge's `scripts/train_eagle3.py` (script era) for tests and demos without a GPU.

`python -m harness.retrain.fake_trainer <train_eagle3.py flags>` is a real, long-running process: it
trains a tiny pure-python bigram model (hashed word ids, softmax, SGD) on the conversations of
`--train-data-path`, so its loss and accuracy really move. Its output follows SpecForge's: a tqdm bar
on stderr redrawn with `\\r` (`Training Epoch E: ..%|bar| n/N [elapsed<left, rate, loss=.., acc=..,
acceptance_rate=.., time=..s, grad_norm=..]`), `Eval - Step ...` metric lines, `Saved ...` lines and a
final `Training completed at step N, saving final checkpoint...`. Checkpoints are
`<output-dir>/epoch_E_step_S/` holding a real EAGLE-3 layout sized for the target's config.json, whose
acceptance.json (read by the SGLang stand-in) follows the model's accuracy, plus `training_state.json`.
`--resume` continues from the last checkpoint like SpecForge does. SIGTERM ends it at once.

`--ckpt-dir DIR` fine-tunes from a drafter as SpecForge does: the checkpoints keep DIR's acceptance profile,
and each of its `by_content` rules (a kind of prompt it is weak on, harness.sim) moves toward the general
profile as training sees rows about it: by min(1, rows seen / ROWS_TO_LEARN), counting a row once per epoch.
Data that holds no such row leaves the weakness as it was: a retrain on the wrong data does not help.

Knobs from the environment: DRAFTBENCH_FAKE_STEP_S (seconds per step, default 0.05) and
DRAFTBENCH_FAKE_FAIL_AT_STEP (exit 1 at that global step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

VOCAB = 48  # hashed word buckets of the toy model
_WORD = re.compile(r"\w+|[^\w\s]")
_CKPT = re.compile(r"^epoch_(\d+)(?:_step_(\d+))?$")
_BAR_CHARS = " ▏▎▍▌▋▊▉█"
ROWS_TO_LEARN = 8  # rows about a weak kind of prompt (times epochs) that make its acceptance the general one


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="train_eagle3.py")
    p.add_argument("--target-model-path", required=True)
    p.add_argument("--train-data-path", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--draft-model-config")
    p.add_argument("--eval-data-path")
    p.add_argument("--num-epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--chat-template", default="llama3")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--ttt-length", type=int, default=7)
    p.add_argument("--save-interval", type=int, default=5000)
    p.add_argument("--log-interval", type=int, default=50)
    p.add_argument("--max-num-steps", type=int)
    p.add_argument("--report-to", default="none")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--ckpt-dir", help="a drafter to fine-tune from (SpecForge: the checkpoint to start with)")
    return p.parse_args(argv)


def user_text(row: dict) -> str:
    turns = row.get("conversations") or row.get("messages") or []
    return " ".join(str(m.get("content", m.get("value", ""))) for m in turns
                    if isinstance(m, dict) and m.get("role", m.get("from")) in ("user", "human")).lower()


def init_profile(ckpt_dir: str | None) -> dict | None:
    """The starting drafter's acceptance.json (per_position, by_content), None without --ckpt-dir."""
    if not ckpt_dir:
        return None
    path = Path(ckpt_dir) / "acceptance.json"
    return json.loads(path.read_text()) if path.is_file() else {"per_position": [0.8, 0.7, 0.6]}


def matches(rules: list[dict], text: str) -> list[int]:
    return [i for i, r in enumerate(rules) if any(w.lower() in text for w in r["contains"])]


def lifted(init: dict, seen: dict[str, int]) -> list[dict]:
    """The starting drafter's by_content rules after training saw `seen[i]` rows about rule i."""
    base = list(init["per_position"])
    out = []
    for i, rule in enumerate(init.get("by_content") or []):
        lift = min(1.0, seen.get(str(i), 0) / ROWS_TO_LEARN)
        weak = list(rule["per_position"])
        n = max(len(weak), len(base))
        weak += [0.0] * (n - len(weak))
        full = base + [0.0] * (n - len(base))
        out.append({"contains": rule["contains"],
                    "per_position": [round(w + (b - w) * lift, 4) for w, b in zip(weak, full, strict=True)]})
    return out


def format_interval(seconds: float) -> str:
    """tqdm's `MM:SS` / `H:MM:SS`."""
    mins, s = divmod(int(seconds), 60)
    h, m = divmod(mins, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def format_bar(desc: str, n: int, total: int, elapsed: float, postfix: dict[str, str]) -> str:
    """One tqdm line as tqdm draws it to a non-terminal (10-character bar)."""
    frac = n / total if total else 0.0
    full, part = divmod(int(frac * 10 * 8), 8)
    bar = _BAR_CHARS[-1] * full + ((_BAR_CHARS[part] + " " * (9 - full)) if full < 10 else "")
    rate = n / elapsed if elapsed > 0 and n else None
    if rate is None:
        rate_s, left = "?it/s", "?"
    else:
        rate_s = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
        left = format_interval((total - n) / rate)
    post = "".join(f", {k}={v}" for k, v in postfix.items())
    return (
        f"{desc}: {frac * 100:3.0f}%|{bar}| {n}/{total} [{format_interval(elapsed)}<{left}, {rate_s}{post}]"
    )


def tokens(row: dict, max_length: int) -> list[int]:
    text = " ".join(str(m.get("content", m.get("value", ""))) for m in row.get("conversations", []))
    return [zlib.crc32(w.lower().encode()) % VOCAB for w in _WORD.findall(text)][:max_length]


class Bigram:
    def __init__(self, weights: list[list[float]] | None = None):
        self.w = weights or [[0.0] * VOCAB for _ in range(VOCAB)]

    def step(self, seqs: list[list[int]], lr: float) -> tuple[float, float, float]:
        """One SGD step over every (token, next token) pair; returns (loss, acc, grad norm)."""
        loss = correct = pairs = 0.0
        grad_sq = 0.0
        for seq in seqs:
            for a, b in zip(seq, seq[1:], strict=False):
                row = self.w[a]
                top = max(row)
                exps = [math.exp(x - top) for x in row]
                z = sum(exps)
                probs = [e / z for e in exps]
                loss -= math.log(max(probs[b], 1e-12))
                correct += row.index(top) == b
                pairs += 1
                for j in range(VOCAB):
                    g = probs[j] - (j == b)
                    grad_sq += g * g
                    row[j] -= lr * g
        if not pairs:
            return 0.0, 0.0, 0.0
        return loss / pairs, correct / pairs, math.sqrt(grad_sq) / pairs


def last_checkpoint(output_dir: Path) -> tuple[Path | None, int, int]:
    """SpecForge's get_last_checkpoint: the highest (epoch, step) `epoch_E[_step_S]` directory."""
    best: tuple[int, int, Path] | None = None
    if output_dir.is_dir():
        for d in output_dir.iterdir():
            m = _CKPT.match(d.name)
            if m and d.is_dir():
                key = (int(m[1]), int(m[2] or 0), d)
                best = key if best is None or key[:2] > best[:2] else best
    return (best[2], best[0], best[1]) if best else (None, 0, 0)


def save(
    args: argparse.Namespace, target_cfg: dict, model: Bigram, epoch: int, step: int, acc: float,
    init: dict | None = None, seen: dict[str, int] | None = None,
) -> None:
    from harness.sim.sglang.fixtures import write_eagle3_drafter

    out = Path(args.output_dir) / f"epoch_{epoch}_step_{step}"
    hidden = int(target_cfg.get("hidden_size", 64))
    heads = int(target_cfg.get("num_attention_heads", 4))
    vocab = int(target_cfg.get("vocab_size", 256))
    per_position = [min(0.95, max(0.05, acc * 0.97**i)) for i in range(args.ttt_length)]
    by_content = None
    # fine-tuned: the starting drafter's profile, its weak spots lifted by what training saw
    if init is not None:
        per_position, by_content = list(init["per_position"]), lifted(init, seen or {}) or None
    write_eagle3_drafter(
        out,
        target_hidden_size=hidden,
        hidden_size=hidden,
        vocab_size=vocab,
        draft_vocab_size=min(256, vocab),
        num_attention_heads=heads,
        num_key_value_heads=int(target_cfg.get("num_key_value_heads", heads)),
        per_position=per_position,
        by_content=by_content,
    )
    cfg_path = out / "config.json"  # SpecForge's draft config copies the target's rope settings
    cfg = json.loads(cfg_path.read_text())
    cfg.update({k: target_cfg[k] for k in ("rope_theta", "rope_scaling", "rope_parameters")
                if k in target_cfg})
    cfg_path.write_text(json.dumps(cfg, indent=1) + "\n")
    state = {"epoch": epoch, "global_step": step, "args": vars(args), "weights": model.w, "seen": seen or {}}
    (out / "training_state.json").write_text(json.dumps(state))
    print(f"Saved full training state to {out}/training_state.json", flush=True)
    print(f"Saved model configuration to {out}", flush=True)


def final_save(args: argparse.Namespace, global_step: int, epoch: int, save: Callable[[int], None]) -> None:
    """SpecForge's end of training: a last checkpoint, unless the last step has just written one."""
    if global_step % args.save_interval != 0:
        print(f"Training completed at step {global_step}, saving final checkpoint...", flush=True)
        save(min(epoch, args.num_epochs - 1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    step_s = float(os.environ.get("DRAFTBENCH_FAKE_STEP_S", "0.05"))
    fail_at = int(os.environ.get("DRAFTBENCH_FAKE_FAIL_AT_STEP", "0") or 0)
    cfg_path = Path(args.target_model_path) / "config.json"
    if not cfg_path.is_file():
        print(
            f"OSError: {args.target_model_path} does not appear to have a file named config.json", flush=True
        )
        return 1
    target_cfg = json.loads(cfg_path.read_text())
    rows = [json.loads(x) for x in Path(args.train_data_path).read_text().splitlines() if x.strip()]
    seqs = [tokens(r, args.max_length) for r in rows]
    init = init_profile(args.ckpt_dir)
    topics = [matches((init or {}).get("by_content") or [], user_text(r)) for r in rows]
    seen: dict[str, int] = {}
    if init is not None:
        print(f"Finetuning from base model: {args.ckpt_dir}", flush=True)
    steps_per_epoch = max(1, math.ceil(len(seqs) / args.batch_size))
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    model, start_epoch, global_step = Bigram(), 0, 0
    if args.resume:
        ckpt, _, _ = last_checkpoint(Path(args.output_dir))
        if ckpt is not None:
            state = json.loads((ckpt / "training_state.json").read_text())
            model = Bigram(state["weights"])
            seen = {str(k): int(v) for k, v in (state.get("seen") or {}).items()}
            start_epoch, global_step = int(state["epoch"]), int(state["global_step"])
            print(
                f"Restored optimizer/scheduler state: epoch={start_epoch}, step={global_step}, "
                f"lr={args.learning_rate:.6f}",
                flush=True,
            )
    print(f"Starting training from epoch:{start_epoch}          step:{global_step}", flush=True)
    lr = (
        0.5 * args.learning_rate / 1e-4
    )  # SGD on a toy model: scaled so SpecForge's default lr learns visibly
    skip = global_step - start_epoch * steps_per_epoch
    acc, stop, epoch = 0.0, False, start_epoch
    for epoch in range(start_epoch, args.num_epochs):
        desc, t0, last = f"Training Epoch {epoch}", time.monotonic(), time.monotonic()
        first = skip if epoch == start_epoch else 0
        sys.stderr.write("\r" + format_bar(desc, first, steps_per_epoch, 0.0, {}))
        sys.stderr.flush()
        for n in range(first, steps_per_epoch):
            time.sleep(step_s)  # the "GPU" time of a step
            global_step += 1
            if fail_at and global_step == fail_at:
                print(
                    "\nRuntimeError: CUDA error: an illegal memory access was "
                    f"encountered (step {global_step})",
                    flush=True,
                )
                return 1
            batch = seqs[n * args.batch_size : (n + 1) * args.batch_size]
            for hits in topics[n * args.batch_size : (n + 1) * args.batch_size]:
                for i in hits:
                    seen[str(i)] = seen.get(str(i), 0) + 1
            loss, acc, grad = model.step(batch, lr)
            now = time.monotonic()
            postfix = {
                "loss": f"{loss:.2f}",
                "acc": f"{acc:.2f}",
                "acceptance_rate": f"{acc * 0.97:.2f}",
                "time": f"{now - last:.2f}s",
                "grad_norm": f"{grad:.2f}",
            }
            last = now
            # like SpecForge's resume, skipped steps count as done in the bar (and its rate)
            sys.stderr.write("\r" + format_bar(desc, n + 1, steps_per_epoch, now - t0, postfix))
            sys.stderr.flush()
            if global_step % args.log_interval == 0:
                sys.stderr.write("\n")
                for i in range(args.ttt_length):
                    print(
                        f"Eval - Step {global_step} [{global_step + 1}/{args.num_epochs}], position {i},  "
                        f"Acc: {acc * 0.97**i:.2f}",
                        flush=True,
                    )
                for i in range(args.ttt_length):
                    print(
                        f"Eval - Step {global_step} [{global_step + 1}/{args.num_epochs}], position {i}, "
                        f"pLoss: {loss * (1 + 0.1 * i)}",
                        flush=True,
                    )
            if global_step % args.save_interval == 0:
                sys.stderr.write("\n")
                save(args, target_cfg, model, epoch, global_step, acc, init, seen)
            if args.max_num_steps is not None and global_step >= args.max_num_steps:
                stop = True
                break
        sys.stderr.write("\n")
        sys.stderr.flush()
        if stop:
            break
    final_save(args, global_step, epoch,
               lambda e: save(args, target_cfg, model, e, global_step, acc, init, seen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
