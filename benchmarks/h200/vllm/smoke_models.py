"""Configs (no weights) of a tiny Llama target and its one-layer EAGLE-3 head, with a byte-level
tokenizer, for `vllm.sh smoke`: vLLM makes random weights itself (`--load-format dummy`, which the head's
load follows).
  python smoke_models.py OUT   -> OUT/target, OUT/draft
The head names its aux layers both ways: SpecForge's nested `eagle_config` ids (output of layer k) and
vLLM's top-level `eagle_aux_hidden_state_layer_ids` (input of layer k), the same layers (docs/vllm.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

H, INTER, LAYERS, HEADS, KV, VOCAB = 512, 1408, 8, 8, 4, 320
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import ByteLevel

    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = ByteLevel(trim_offsets=False)
    tok.add_special_tokens(SPECIALS)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
        "pad_token": "<|pad|>", "model_max_length": 4096, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT}, indent=1))


def configs() -> tuple[dict, dict]:
    base = {"model_type": "llama", "hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "head_dim": H // HEADS, "hidden_act": "silu",
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "vocab_size": VOCAB,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "attention_bias": False,
            "mlp_bias": False,
            "dtype": "bfloat16", "initializer_range": 0.02, "tie_word_embeddings": False}
    target = dict(base, architectures=["LlamaForCausalLM"], num_hidden_layers=LAYERS)
    nested = [1, LAYERS // 2 - 1, LAYERS - 4]  # SGLang's default: outputs of these layers
    draft = dict(base, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, target_hidden_size=H,
                 draft_vocab_size=VOCAB, eagle_aux_hidden_state_layer_ids=[k + 1 for k in nested],
                 eagle_config={"eagle_aux_hidden_state_layer_ids": nested, "use_aux_hidden_state": True})
    return target, draft


def main(out: str) -> None:
    root = Path(out)
    target, draft = configs()
    for name, cfg in (("target", target), ("draft", draft)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.json").write_text(json.dumps(cfg, indent=1))
        tokenizer(root / name)
    print(f"configs in {root}/target and {root}/draft ({LAYERS} layers, hidden {H}, vocab {VOCAB})")


if __name__ == "__main__":
    main(sys.argv[1])
