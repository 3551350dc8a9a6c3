"""Train a small byte-level chat target on the GPU machine, from text that machine already has.

The H200 machine has no network and a 64 MiB limit on what travels, so the target is trained there, in
about a minute, on the Python standard library's own source: a user turn holds a few lines of a file,
the assistant turn continues the file. The result is a real (if small) language model whose greedy
continuations a drafter can learn, unlike a random-weight target. It writes:

* OUT/tiny-stdlib/: config.json (Llama, the devbundle's byte tokenizer, shape `--shape`), model.safetensors
  (HF names, which SGLang loads), tokenizer files, generation_config.json;
* OUT/regen-in.jsonl: prompts from files the target trained on, in SpecForge's conversation format,
  for `draftbench regen` to answer with the target itself;
* OUT/suite.yaml: prompts from held-out files (none of them trained on), for `draftbench run`.

    python3 benchmarks/h200/tiny_target.py OUT --tokenizer .devbundle/models/target [--steps 1500]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import sysconfig
import time
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tinylm import byte_table, chat_ids  # noqa: E402

SHAPES = {"tiny": (512, 1408, 8, 8, 4), "micro": (64, 128, 4, 4, 2)}  # hidden, inter, layers, heads, kv


def corpus(root: Path, limit: int) -> list[tuple[str, bytes]]:
    files, total = [], 0
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts or "dist-packages" in p.parts:
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if len(data) < 2048 or b"\0" in data:
            continue
        files.append((str(p.relative_to(root)), data))
        total += len(data)
        if total >= limit:
            break
    return files


def held_out(name: str) -> bool:
    return zlib.crc32(name.encode()) % 20 == 0  # 5 % of the files: the benchmark suite's prompts


def user_slice(rng: random.Random, data: bytes, lines: tuple[int, int]) -> tuple[str, int] | None:
    """A few whole lines of a file, as text, and the byte offset after them."""
    rows = data.split(b"\n")
    if len(rows) < 40:
        return None
    i = rng.randrange(0, len(rows) - 30)
    n = rng.randint(*lines)
    text = b"\n".join(rows[i : i + n]) + b"\n"
    if not text.strip() or len(text) > 600:
        return None
    try:
        return text.decode(), len(b"\n".join(rows[:i])) + (1 if i else 0) + len(text)
    except UnicodeDecodeError:
        return None


def config(shape: str, vocab: int) -> dict:
    h, inter, layers, heads, kv = SHAPES[shape]
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": h // heads, "hidden_act": "silu",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "vocab_size": vocab,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "attention_bias": False, "mlp_bias": False,
        "dtype": "bfloat16", "initializer_range": 0.02, "tie_word_embeddings": False,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="directory with the byte tokenizer (prep_models.py)")
    ap.add_argument("--corpus", default=sysconfig.get_paths()["stdlib"])
    ap.add_argument("--corpus-mb", type=float, default=40)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--regen-rows", type=int, default=1536)
    ap.add_argument("--suite-prompts", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    out, tok_dir = Path(a.out), Path(a.tokenizer)
    tdir = out / "tiny-stdlib"
    tdir.mkdir(parents=True, exist_ok=True)
    table = byte_table(tok_dir / "tokenizer.json")
    vocab = json.loads((tok_dir / "config.json").read_text())["vocab_size"] \
        if (tok_dir / "config.json").exists() else 320
    files = corpus(Path(a.corpus), int(a.corpus_mb * 2**20))
    train = [(n, d) for n, d in files if not held_out(n)]
    test = [(n, d) for n, d in files if held_out(n)]
    print(f"corpus: {len(files)} files from {a.corpus}, {sum(len(d) for _, d in train) / 2**20:.1f} MiB "
          f"to train on, {len(test)} held out", flush=True)
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = config(a.shape, vocab)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k != "dtype"})).to(dev)
    model.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    lut = torch.tensor(table, dtype=torch.long)
    weights = [len(d) for _, d in train]

    def sample() -> list[int]:
        while True:
            _, data = rng.choices(train, weights)[0]
            got = user_slice(rng, data, (2, 8))
            if got is None:
                continue
            user, end = got
            ids, start = chat_ids(user, "", table)
            ids = ids[:start]
            rest = data[end : end + a.seq]
            return (ids + lut[torch.frombuffer(bytearray(rest), dtype=torch.uint8).long()].tolist())[: a.seq]

    t0, step = time.monotonic(), 0
    model.train()
    while step < a.steps and time.monotonic() - t0 < a.max_seconds:
        lr = a.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        rows = [sample() for _ in range(a.batch)]
        n = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), n, dtype=torch.long)
        labels = torch.full((len(rows), n), -100, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            labels[i, : len(r)] = torch.tensor(r)
        ids, labels = ids.to(dev), labels.to(dev)
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0 or step == 1:
            print(f"target step {step} loss {loss.item():.3f} ({loss.item() / math.log(2):.2f} bits/byte) "
                  f"lr {lr:.2e} {time.monotonic() - t0:.0f}s", flush=True)
    print(f"target trained: {step} steps in {time.monotonic() - t0:.0f}s, last loss {loss.item():.3f}",
          flush=True)

    state = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(tdir / "model.safetensors"), metadata={"format": "pt"})
    (tdir / "config.json").write_text(json.dumps(cfg, indent=1))
    (tdir / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2,
                                                             "pad_token_id": 0}))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, tdir / f)

    def prompts(pool, count, tag):
        seen, rows = set(), []
        while len(rows) < count:
            name, data = rng.choice(pool)
            got = user_slice(rng, data, (3, 10))
            if got and got[0] not in seen:
                seen.add(got[0])
                rows.append({"id": f"{tag}{len(rows):05d}", "file": name, "text": got[0]})
        return rows

    with open(out / "regen-in.jsonl", "w") as fh:
        for r in prompts(train, a.regen_rows, "r"):
            fh.write(json.dumps({"id": r["id"], "conversations": [{"role": "user", "content": r["text"]}]})
                     + "\n")
    suite = {"name": "stdlib-heldout", "description": "a few lines of Python standard-library files the tiny "
             "target never trained on; the target continues them",
             "prompts": [{"id": r["id"], "category": "code", "text": r["text"]}
                         for r in prompts(test or train, a.suite_prompts, "s")]}
    import yaml

    (out / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    print(f"wrote {tdir}, {out / 'regen-in.jsonl'} ({a.regen_rows} rows), {out / 'suite.yaml'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
