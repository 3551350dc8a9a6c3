"""A small EAGLE-3 trainer with the command line and output of SpecForge's `scripts/train_eagle3.py`.

SpecForge cannot be brought to the H200 machine (no network, 64 MiB), so this stands in for it there:
`draftbench train PLAN --specforge-dir benchmarks/h200/specforge_tiny ...` finds `scripts/train_eagle3.py`
here, launches it under torchrun like the real one, follows its tqdm bar and `Eval` lines, and finds its
`epoch_E_step_S/` checkpoints. Unlike harness/retrain/fake_trainer.py it trains for real, on the GPU:

* online, like SpecForge's default: every batch runs the target (HF transformers, bf16) over the
  regenerated conversations to get its aux hidden states (outputs of the draft config's
  `eagle_aux_hidden_state_layer_ids`) and its next-token distributions;
* the draft (benchmarks/h200/tinylm.py, SGLang's LlamaForCausalLMEagle3 layout) learns with
  test-time training over `--ttt-length` draft steps, loss sum_k 0.8^k * CE(target p, draft) over the
  assistant tokens, SpecForge's recipe at small scale;
* each log interval prints, per position, top-1 accuracy and loss, plus the accept length the draft
  would reach on the training data with `steps` chained drafts (`--ttt-length - 1`), counted exactly
  under teacher forcing: a chain accepts its leading correct drafts.

Checkpoints are `<output-dir>/epoch_E_step_S/{config.json, model.safetensors, training_state.pt}`.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[4])]  # benchmarks/h200 (tinylm), the repo (harness)

import torch  # noqa: E402
from tinylm import Eagle3Draft, aux_hooks, byte_table, chat_ids, draft_config, save_checkpoint  # noqa: E402

from harness.retrain.fake_trainer import final_save, format_bar, last_checkpoint, parse_args  # noqa: E402

DECAY = 0.8


def rows_of(path: str, table: list[int], max_length: int) -> list[tuple[list[int], int]]:
    """(ids, first assistant position) of each two-turn conversation in a SpecForge JSONL file."""
    out = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        conv = json.loads(line).get("conversations") or []
        user = next((m.get("content", "") for m in conv if m.get("role") == "user"), None)
        bot = next((m.get("content", "") for m in conv if m.get("role") == "assistant"), None)
        if user is None or not bot:
            continue
        ids, start = chat_ids(user, bot, table)
        if start + 4 < min(len(ids), max_length):
            out.append((ids[:max_length], start))
    return out


def batch_tensors(rows, dev):
    n = max(len(r) for r, _ in rows)
    ids = torch.zeros(len(rows), n, dtype=torch.long)
    mask = torch.zeros(len(rows), n, dtype=torch.bool)
    for i, (r, start) in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, start : len(r)] = True
    return ids.to(dev), mask.to(dev)


def step_stats(draft, target, store, ids, mask, steps, dev):
    """Loss, per-position accuracy/loss and the exact teacher-forced accept lengths of one batch."""
    store.clear()
    with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        tlogits = target(input_ids=ids).logits.float()
    aux = torch.cat(store, dim=-1).float()
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        logits = draft.ttt_logits(target.model.embed_tokens, aux, ids, steps)
    t = ids.shape[1]
    total, accs, plosses, hits = 0.0, [], [], []
    for k, lg in enumerate(logits):
        n = t - 2 - k  # rows that have a token to predict: position t + 2 + k exists
        if n <= 0:
            break
        m = mask[:, 2 + k :]
        p = torch.softmax(tlogits[:, 1 + k : t - 1], dim=-1)  # the target's distribution of ids[t + 2 + k]
        lp = torch.log_softmax(lg[:, :n].float(), dim=-1)
        ce = -(p * lp).sum(-1)
        denom = m.sum().clamp(min=1)
        ploss = (ce * m).sum() / denom
        hit = (lp.argmax(-1) == p.argmax(-1)) & m
        total = total + DECAY**k * ploss
        accs.append((hit.sum() / denom).item())
        plosses.append(ploss.item())
        hits.append((hit, m))
    # exact accept length of chains starting at each assistant position (teacher forcing = the chain's
    # own tokens while its drafts are right): 1 + its leading correct drafts
    n0 = t - 1 - len(hits)
    alive = hits[0][1][:, :n0].clone() if hits else None
    acc_len = None
    if alive is not None and alive.any():
        starts = alive.sum().item()
        accepted = torch.zeros_like(alive, dtype=torch.float32)
        for hit, _ in hits:
            alive = alive & hit[:, :n0]
            accepted += alive.float()
        acc_len = 1.0 + accepted.sum().item() / starts
    return total, accs, plosses, acc_len


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    from transformers import LlamaForCausalLM

    tpath = Path(args.target_model_path)
    tcfg = json.loads((tpath / "config.json").read_text())
    base = Path(args.ckpt_dir) if args.ckpt_dir else None  # SpecForge's --ckpt-dir: fine-tune from a drafter
    cfg_file = base / "config.json" if base is not None else args.draft_model_config
    cfg = json.loads(Path(cfg_file).read_text()) if cfg_file else draft_config(tcfg)
    layer_ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32  # bf16 matmuls are slow on CPUs
    target = LlamaForCausalLM.from_pretrained(str(tpath), dtype=dtype).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    store = aux_hooks(target, layer_ids)
    table = byte_table(tpath / "tokenizer.json")
    rows = rows_of(args.train_data_path, table, args.max_length)
    if not rows:
        print(f"ValueError: no two-turn conversations in {args.train_data_path}", flush=True)
        return 1
    steps = max(1, args.ttt_length)
    torch.manual_seed(0)
    draft = Eagle3Draft(cfg).to(dev)
    opt = torch.optim.AdamW(draft.parameters(), lr=args.learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    per_epoch = max(1, len(rows) // args.batch_size)
    total_steps = min(args.num_epochs * per_epoch, args.max_num_steps or 10**9)
    start_epoch, global_step = 0, 0
    if base is not None:
        st = torch.load(base / "training_state.pt", map_location=dev)
        draft.load_state_dict(st["model"])
        print(f"Finetuning from base model: {base}", flush=True)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.resume:
        ckpt, _, _ = last_checkpoint(out_dir)
        if ckpt is not None and (ckpt / "training_state.pt").exists():
            st = torch.load(ckpt / "training_state.pt", map_location=dev)
            draft.load_state_dict(st["model"])
            opt.load_state_dict(st["optimizer"])
            start_epoch, global_step = int(st["epoch"]), int(st["global_step"])
            print(f"Restored optimizer/scheduler state: epoch={start_epoch}, step={global_step}, "
                  f"lr={args.learning_rate:.6f}", flush=True)
    print(f"Starting training from epoch:{start_epoch}          step:{global_step}", flush=True)
    print(f"{len(rows)} conversations, {sum(len(r) - s for r, s in rows)} assistant tokens; draft "
          f"{sum(p.numel() for p in draft.parameters()) / 1e6:.2f}M parameters, aux layers {layer_ids}",
          flush=True)

    def save(epoch: int) -> None:
        d = out_dir / f"epoch_{epoch}_step_{global_step}"
        save_checkpoint(draft, cfg, d)
        torch.save({"epoch": epoch, "global_step": global_step, "args": vars(args),
                    "model": draft.state_dict(), "optimizer": opt.state_dict()}, d / "training_state.pt")
        print(f"Saved full training state to {d}/training_state.pt", flush=True)
        print(f"Saved model configuration to {d}", flush=True)

    rng = random.Random(0)
    epoch, stop = start_epoch, False
    for epoch in range(start_epoch, args.num_epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        desc, t0, last = f"Training Epoch {epoch}", time.monotonic(), time.monotonic()
        for n in range(per_epoch):
            lr = args.learning_rate * min(1.0, (global_step + 1) / 50)
            lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, global_step / total_steps)))
            for g in opt.param_groups:
                g["lr"] = lr
            batch = [rows[i] for i in order[n * args.batch_size : (n + 1) * args.batch_size]]
            ids, mask = batch_tensors(batch, dev)
            loss, accs, plosses, acc_len = step_stats(draft, target, store, ids, mask, steps, dev)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad = torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0).item()
            opt.step()
            global_step += 1
            now = time.monotonic()
            postfix = {"loss": f"{loss.item():.2f}", "acc": f"{accs[0]:.2f}",
                       "acceptance_rate": f"{(acc_len - 1) / steps if acc_len else 0:.2f}",
                       "time": f"{now - last:.2f}s", "grad_norm": f"{grad:.2f}"}
            last = now
            sys.stderr.write("\r" + format_bar(desc, n + 1, per_epoch, now - t0, postfix))
            sys.stderr.flush()
            if global_step % args.log_interval == 0 or global_step == total_steps:
                sys.stderr.write("\n")
                for i, a in enumerate(accs):
                    print(f"Eval - Step {global_step} [{global_step + 1}/{args.num_epochs}], "
                          f"position {i},  Acc: {a:.2f}",
                          flush=True)
                for i, pl in enumerate(plosses):
                    print(f"Eval - Step {global_step} [{global_step + 1}/{args.num_epochs}], "
                          f"position {i}, pLoss: {pl}",
                          flush=True)
                print(f"teacher-forced accept length with {steps} draft steps: "
                      f"{acc_len if acc_len is not None else float('nan'):.3f}", flush=True)
            if global_step % args.save_interval == 0:
                sys.stderr.write("\n")
                save(epoch)
            if global_step >= total_steps:
                stop = True
                break
        sys.stderr.write("\n")
        sys.stderr.flush()
        if stop:
            break
    final_save(args, global_step, epoch, save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
