"""The small EAGLE-3 trainer of the H200 recipe (benchmarks/h200/tinylm.py, specforge_tiny), on the CPU.

What the GPU run relies on: the draft is computed as SGLang's LlamaForCausalLMEagle3 computes it (the
parallel training pass equals the server's step-by-step chain), the tokenizer helpers equal the HF
tokenizer and chat template that SGLang uses, the checkpoint has SpecForge's layout and passes
draftbench's own checks, and a trained head really speeds up greedy speculative decoding of its target
without changing its output. Needs torch and transformers (the `train` extra); skipped without them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from harness.checks import checkpoint as ck
from harness.common.safetensors_io import read_header

for _need in ("torch", "transformers"):
    if importlib.util.find_spec(_need) is None:
        pytest.skip(f"could not import '{_need}': install the tiny-train extra", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


class _OnFirstUse:
    """A module imported when a test first reaches into it: torch and transformers take ~2 s to import, and
    every pytest-xdist worker collects this file, while one runs its tests."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        module = self.__dict__.get("_module")
        if module is None and attr.startswith("__"):
            # collection asks every name of the file for `__test__` and the like (pytest's nose check, via
            # anyio's plugin): no answer from a module not imported yet, or each worker would import torch
            raise AttributeError(attr)
        if module is None:
            if self._name == "tinylm" and str(ROOT / "benchmarks" / "h200") not in sys.path:
                sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
            module = importlib.import_module(self._name)
            if self._name == "torch":
                # models of a few thousand weights: one thread is as fast alone, and beside the suite's other
                # workers (pytest-xdist on two cores) torch's default of a thread per core made this file 8x
                # slower
                module.set_num_threads(1)
            self.__dict__["_module"] = module
            globals()[self._name] = module  # this module's later uses go to the module itself
        return getattr(module, attr)


torch = _OnFirstUse("torch")
transformers = _OnFirstUse("transformers")
tinylm = _OnFirstUse("tinylm")

SCALE = 4  # token embeddings x4: the next token depends on the current one most, on the context too
MICRO = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
         "vocab_size": 320, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "attention_bias": False,
         "mlp_bias": False, "tie_word_embeddings": False, "architectures": ["LlamaForCausalLM"],
         "model_type": "llama"}


def _trainer():
    path = ROOT / "benchmarks" / "h200" / "specforge_tiny" / "scripts" / "train_eagle3.py"
    spec = importlib.util.spec_from_file_location("tiny_train_eagle3", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parallel_training_pass_equals_the_servers_chain():
    """Every draft step of every chain start, computed at once with the TTT masks, equals the chain the
    server computes with a KV cache: extend over the target's hidden states, then decode steps."""
    torch.manual_seed(0)
    cfg = tinylm.draft_config(dict(MICRO, vocab_size=40))
    draft = tinylm.Eagle3Draft(cfg).double()
    embed = torch.nn.Embedding(40, 64).double()
    ids = torch.randint(0, 40, (2, 14))
    aux = torch.randn(2, 14, 3 * 64, dtype=torch.float64)
    steps = 4
    par = draft.ttt_logits(embed, aux, ids, steps)
    for start in range(0, 14 - 1 - steps):
        chain = draft.chain_logits(embed, aux, ids, start, steps)
        for k in range(steps):
            assert torch.allclose(par[k][:, start], chain[k], atol=1e-9), (start, k)
    # and the masks matter: without the step-k diagonal keys the chain would differ
    assert not torch.allclose(par[2][:, 3], draft.chain_logits(embed, aux, ids, 3, 1)[0])


def test_tokenizer_helpers_equal_the_hf_tokenizer_and_chat_template(tmp_path):
    tinylm.write_byte_tokenizer(tmp_path)
    table = tinylm.byte_table(tmp_path / "tokenizer.json")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "def f(x):\n    return x  # é ü 中\r\n\t"
    assert hf(text, add_special_tokens=False)["input_ids"] == tinylm.encode(text, table)
    user, answer = "import os\nx = 1\n", "y = 2"

    def ids(messages, **kw):
        out = hf.apply_chat_template(messages, tokenize=True, **kw)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    prompt, start = tinylm.chat_ids(user, None, table)
    assert ids([{"role": "user", "content": user}], add_generation_prompt=True) == prompt
    full, start2 = tinylm.chat_ids(user, answer, table)
    assert ids([{"role": "user", "content": user}, {"role": "assistant", "content": answer}]) == full
    assert start == start2 == len(prompt)


def _target(tmp_path: Path) -> Path:
    """A random micro Llama whose greedy continuation is learnable in a few CPU seconds: token embeddings
    large against the layers' random updates make its next token mostly a function of the current one
    (a random bigram walk), and only printable ASCII bytes can win the argmax, so its answers survive the
    round trip through text that regeneration makes."""
    d = tmp_path / "target"
    tinylm.write_byte_tokenizer(d)
    table = tinylm.byte_table(d / "tokenizer.json")
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**MICRO))
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(SCALE)
        keep = torch.zeros(MICRO["vocab_size"], dtype=torch.bool)
        keep[[table[b] for b in range(0x20, 0x7F)]] = True
        model.lm_head.weight[~keep] = 0.0
        model.lm_head.weight[keep] += 0.05 * model.lm_head.weight[keep].sign()
    model.save_pretrained(str(d))
    (d / "config.json").write_text(json.dumps(dict(MICRO, dtype="float32")))
    return d


def _greedy(model, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def _speculate(model, store, draft, ids: list[int], n: int, steps: int) -> tuple[list[int], float]:
    """Greedy speculative decoding as SGLang runs it with topk 1: the draft proposes `steps` tokens after
    the target's last token, the target verifies them in one pass and commits the accepted prefix plus
    its own next token. Returns the generated tokens and the accept length (committed per verify)."""
    seq = list(ids)
    with torch.no_grad():
        store.clear()
        logits = model(input_ids=torch.tensor([seq])).logits
        seq.append(int(logits[0, -1].argmax()))  # the prefill's token
        aux = torch.cat(store, -1)
        verifies = committed = 0
        while len(seq) - len(ids) < n:
            start = len(seq) - 2  # the last position the target has hidden states for
            chain = draft.chain_logits(model.model.embed_tokens, aux, torch.tensor([seq]), start, steps,
                                       free=True)
            drafts = [int(lg[0].argmax()) for lg in chain]
            store.clear()
            logits = model(input_ids=torch.tensor([seq + drafts])).logits[0]
            aux_all = torch.cat(store, -1)
            accepted = 0
            for k, d in enumerate(drafts):
                if int(logits[len(seq) - 1 + k].argmax()) != d:
                    break
                accepted += 1
            bonus = int(logits[len(seq) - 1 + accepted].argmax())
            seq += drafts[:accepted] + [bonus]
            aux = aux_all[:, : len(seq) - 1]
            verifies += 1
            committed += accepted + 1
    return seq[len(ids):][:n], committed / verifies


def test_trained_head_speeds_up_its_target_losslessly(tmp_path, capsys):
    """The GPU recipe in miniature: answers regenerated by the target itself (greedy), the trainer run
    with SpecForge's command line, its checkpoint checked by draftbench and loaded back, then greedy
    speculative decoding with it: same tokens as the target alone, and more than 1.5 tokens per verify
    (an untrained head of the same shape: about 1)."""
    tdir = _target(tmp_path)
    table = tinylm.byte_table(tdir / "tokenizer.json")
    byte_of = {t: b for b, t in enumerate(table)}
    model = transformers.LlamaForCausalLM.from_pretrained(str(tdir)).eval()
    prompts = [f"x{i} = {i * 7}\nprint(x{i})\n" for i in range(16)]
    rows = []
    for i, p in enumerate(prompts):
        ids, _ = tinylm.chat_ids(p, None, table)
        # as the server would return it: bytes of the byte tokens, decoded as UTF-8 (padding ids dropped)
        answer = bytes(byte_of[t] for t in _greedy(model, ids, 24) if t in byte_of).decode("utf-8", "replace")
        rows.append({"id": f"r{i}", "conversations": [{"role": "user", "content": p},
                                                      {"role": "assistant", "content": answer}]})
    data = tmp_path / "regen.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ckpt"
    draft_cfg = tmp_path / "draft.json"  # SpecForge's default ids [1, L/2-1, L-4] repeat layer 1 on 4 layers
    draft_cfg.write_text(json.dumps(tinylm.draft_config(MICRO, [0, 1, 2])))
    rc = _trainer().main(["--target-model-path", str(tdir), "--train-data-path", str(data),
                          "--output-dir", str(out), "--draft-model-config", str(draft_cfg),
                          "--num-epochs", "100", "--batch-size", "8", "--learning-rate", "5e-3",
                          "--max-length", "256", "--chat-template", "bytes", "--tp-size", "1",
                          "--ttt-length", "3", "--log-interval", "20", "--max-num-steps", "100"])
    assert rc == 0
    log = capsys.readouterr().out
    assert "Training completed at step 100, saving final checkpoint..." in log
    assert [d.name for d in out.iterdir()] == ["epoch_49_step_100"]  # 16 rows / batch 8 = 2 steps an epoch
    ckpt = out / "epoch_49_step_100"
    assert (ckpt / "training_state.pt").is_file()

    # SpecForge's layout, and draftbench's own checkpoint checks find nothing wrong with it
    header = read_header(ckpt / "model.safetensors")
    cfg = json.loads((ckpt / "config.json").read_text())
    assert tuple(header["fc.weight"].shape) == (64, 3 * 64)
    assert tuple(header["midlayer.self_attn.q_proj.weight"].shape) == (64, 2 * 64)
    assert tuple(header["lm_head.weight"].shape) == (320, 64)
    assert header["d2t"].dtype == "I64" and header["t2d"].dtype == "BOOL"
    facts = ck.DrafterFacts(str(ckpt), cfg, header)
    assert ck.check_shapes("v", facts, MICRO) == []
    assert ck.drafter_kind(cfg, header) == "eagle3"

    draft, _ = tinylm.load_checkpoint(ckpt)
    draft.eval()
    store = tinylm.aux_hooks(model, cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    fresh = tinylm.Eagle3Draft(cfg).eval()
    trained, untrained = [], []
    for p in prompts:
        ids, _ = tinylm.chat_ids(p, None, table)
        want = _greedy(model, ids, 20)
        got, accept = _speculate(model, store, draft, ids, 20, 3)
        assert got == want  # speculative decoding never changes greedy output
        base, accept0 = _speculate(model, store, fresh, ids, 20, 3)
        assert base == want
        trained.append(accept)
        untrained.append(accept0)
    mean = sum(trained) / len(trained)
    assert mean > 1.5, trained
    assert sum(untrained) / len(untrained) < 1.15, untrained
    # the trainer's own estimate (teacher-forced, on the same answers) tells the same story
    estimate = float(log.rsplit("teacher-forced accept length with 3 draft steps: ", 1)[1].split()[0])
    assert estimate > 1.5
