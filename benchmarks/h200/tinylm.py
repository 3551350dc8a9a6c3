"""A small EAGLE-3 draft in plain torch, computed as SGLang 0.5.15.post1 computes its draft.

The draft is SGLang's `LlamaForCausalLMEagle3` (srt/models/llama_eagle3.py) with one decoder layer, and
its weights carry SpecForge's names (REFERENCE §6.2), so a checkpoint written by `save_checkpoint` loads
into `--speculative-draft-model-path` as it is:

* `fc` maps the target's three aux hidden states (outputs of layers `eagle_aux_hidden_state_layer_ids`,
  concatenated low, mid, high) to the draft's width; later draft steps feed the draft's own pre-norm
  output back instead (`hidden.shape[-1] == H`, so `fc` is skipped, as in SGLang);
* `midlayer`: residual = hidden; x = cat(input_layernorm(embed), hidden_norm(hidden)) (width 2H) ->
  attention -> residual += attn; mlp(post_attention_layernorm(residual)) + residual = the step's
  output, pre-norm; logits = lm_head(norm(output));
* the token embedding is the target's own (SGLang's `set_embed` replaces the draft's).

`ttt_logits` trains all draft steps of every chain start of a sequence at once ("test-time training"):
step k of the chain that starts after position t sits at position t + k, reads the token at t + 1 + k and
predicts the one at t + 2 + k; its attention sees the step-0 keys of positions <= t (made from the
target's hidden states, as SGLang's draft-extend writes them) and its own chain's keys of steps 1..k (as
draft decode appends them). `chain_logits` computes one chain the way the server does, step by step
with a growing cache; the tests check that both agree.

Needs torch only (tokenisation helpers need nothing). Used by tiny_target.py and
specforge_tiny/scripts/train_eagle3.py; see docs/real-gpu.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

IM_START, IM_END = 3, 4  # the devbundle byte tokenizer: <|pad|> <|bos|> <|eos|> <|im_start|> <|im_end|>


# --- byte tokenizer ---------------------------------------------------------------------------------------


def byte_table(tokenizer_json: Path) -> list[int]:
    """Token id of each byte value for the byte-level BPE tokenizer without merges that
    ../shared/gpu/prep_models.py writes (ids 0-4 special, then the ByteLevel alphabet in sorted order)."""
    vocab = json.loads(Path(tokenizer_json).read_text())["model"]["vocab"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):  # GPT-2's bytes_to_unicode, which the ByteLevel pre-tokenizer uses
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char = dict(zip(bs, (chr(c) for c in cs), strict=True))
    return [vocab[char[b]] for b in range(256)]


def encode(text: str | bytes, table: list[int]) -> list[int]:
    data = text.encode() if isinstance(text, str) else text
    return [table[b] for b in data]


def chat_ids(user: str, assistant: str | None, table: list[int]) -> tuple[list[int], int]:
    """The tokenizer's chat template (`<|im_start|>role\\ncontent<|im_end|>\\n`, generation prompt
    `<|im_start|>assistant\\n`) as ids, and where the assistant's content starts."""
    ids = [IM_START, *encode("user\n" + user, table), IM_END, *encode("\n", table), IM_START]
    ids += encode("assistant\n", table)
    start = len(ids)
    if assistant is not None:
        ids += [*encode(assistant, table), IM_END, *encode("\n", table)]
    return ids, start


# --- the draft --------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (SGLang `get_rope(..., is_neox_style=True)`, HF `rotate_half`);
    x: [B, heads, T, hd], pos: [T]."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
    f = pos.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_theta(cfg: dict) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def draft_config(target_cfg: dict, aux_layer_ids: list[int] | None = None) -> dict:
    """A one-layer EAGLE-3 draft config for a Llama target, full vocabulary (d2t is all zeros)."""
    n = int(target_cfg["num_hidden_layers"])
    ids = aux_layer_ids or [1, n // 2 - 1, n - 4]  # SpecForge's default; SGLang adds 1 (input of layer)
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_parameters", "rope_theta",
            "rope_scaling", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "attention_bias",
            "mlp_bias", "initializer_range")
    cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
    return dict(cfg, architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                tie_word_embeddings=False, target_hidden_size=target_cfg["hidden_size"],
                draft_vocab_size=target_cfg["vocab_size"], dtype="bfloat16",
                eagle_config={"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True})


class _Attn(nn.Module):
    def __init__(self, h: int, nh: int, nkv: int, hd: int):
        super().__init__()
        self.q_proj = nn.Linear(2 * h, nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)


class _MLP(nn.Module):
    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, h: int, nh: int, nkv: int, hd: int, inter: int, eps: float):
        super().__init__()
        self.self_attn = _Attn(h, nh, nkv, hd)
        self.mlp = _MLP(h, inter)
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)


class Eagle3Draft(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h = int(cfg["hidden_size"])
        self.nh = int(cfg["num_attention_heads"])
        self.nkv = int(cfg.get("num_key_value_heads") or self.nh)
        self.hd = int(cfg.get("head_dim") or h // self.nh)
        self.theta = rope_theta(cfg)
        n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        self.fc = nn.Linear(n_aux * int(cfg.get("target_hidden_size", h)), h, bias=False)
        self.midlayer = _Layer(h, self.nh, self.nkv, self.hd, int(cfg["intermediate_size"]),
                               float(cfg["rms_norm_eps"]))
        self.norm = RMSNorm(h, float(cfg["rms_norm_eps"]))
        self.lm_head = nn.Linear(h, int(cfg["draft_vocab_size"]), bias=False)

    def qkv(self, emb: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor):
        """Queries, keys and values of one step for every position; emb/hidden: [B, T, H], pos: [T]."""
        m = self.midlayer
        x = torch.cat([m.input_layernorm(emb), m.hidden_norm(hidden)], dim=-1)
        b, t, _ = x.shape
        a = m.self_attn
        q = a.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = a.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = a.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        return _rope(q, pos, self.theta), _rope(k, pos, self.theta), v

    def finish(self, q, keys, values, mask, residual):
        """Attention over `keys`/`values` ([B, nkv, S, hd]) under `mask` ([T, S] bool, True = visible),
        then the rest of the layer; returns (pre-norm output, logits)."""
        rep = self.nh // self.nkv
        att = F.scaled_dot_product_attention(q, keys.repeat_interleave(rep, 1),
                                             values.repeat_interleave(rep, 1), attn_mask=mask)
        b, _, t, _ = att.shape
        m = self.midlayer
        residual = m.self_attn.o_proj(att.transpose(1, 2).reshape(b, t, self.nh * self.hd)) + residual
        out = m.mlp(m.post_attention_layernorm(residual)) + residual
        return out, self.lm_head(self.norm(out))

    def ttt_logits(self, embed, aux: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Logits of draft steps 0..steps-1 for every chain start t; aux: [B, T, 3*Ht] (target, position
        t), ids: [B, T]. Entry k, row t predicts ids[t + 2 + k] (rows past the end are padding)."""
        b, t = ids.shape
        pos = torch.arange(t, device=ids.device)
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        diag = torch.eye(t, dtype=torch.bool, device=ids.device)
        hidden, keys, values, masks, out = self.fc(aux), [], [], [causal], []
        for k in range(steps):
            tok = torch.zeros_like(ids)
            tok[:, : max(0, t - 1 - k)] = ids[:, 1 + k :]
            q, kk, vv = self.qkv(embed(tok), hidden, pos + k)
            keys.append(kk)
            values.append(vv)
            if k:
                masks.append(diag)
            hidden, logits = self.finish(q, torch.cat(keys, 2), torch.cat(values, 2), torch.cat(masks, 1),
                                         hidden)
            out.append(logits)
        return out

    @torch.no_grad()
    def chain_logits(self, embed, aux: torch.Tensor, ids: torch.Tensor, start: int, steps: int,
                     *, free: bool = False):
        """One draft chain as the server runs it: extend over positions 0..start with the target's
        hidden states (aux[:, :start + 1]; ids[:, 1:start + 2] are the tokens after them, the last one
        the token the target just produced), then `steps - 1` decode steps, each appending its key.
        Teacher-forced (step k reads ids[start + 1 + k]) unless `free`, where each step reads the
        previous step's greedy token, as in serving. Returns a list of [B, V] logits."""
        ids0 = ids[:, 1 : start + 2]
        n = ids0.shape[1]
        pos = torch.arange(n, device=ids.device)
        q, kc, vc = self.qkv(embed(ids0), self.fc(aux[:, :n]), pos)
        mask = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        hidden, logits = self.finish(q, kc, vc, mask, self.fc(aux[:, :n]))
        hidden, out = hidden[:, -1:], [logits[:, -1]]
        for k in range(1, steps):
            tok = out[-1].argmax(-1, keepdim=True) if free else ids[:, start + 1 + k : start + 2 + k]
            q, kk, vv = self.qkv(embed(tok), hidden, torch.tensor([start + k], device=ids.device))
            kc, vc = torch.cat([kc, kk], 2), torch.cat([vc, vv], 2)
            hidden, logits = self.finish(q, kc, vc, None, hidden)
            out.append(logits[:, -1])
        return out


def save_checkpoint(draft: Eagle3Draft, cfg: dict, out: Path) -> None:
    """config.json + model.safetensors in SpecForge's layout (bf16, d2t/t2d for the full vocabulary)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.state_dict().items()}
    vd, v = int(cfg["draft_vocab_size"]), int(cfg["vocab_size"])
    used = torch.arange(vd)  # the draft vocabulary is the whole vocabulary: target id = draft id
    tensors["d2t"] = (used - torch.arange(vd)).to(torch.int64)
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[used] = True
    tensors["t2d"] = t2d
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=1))


def load_checkpoint(path: Path) -> tuple[Eagle3Draft, dict]:
    from safetensors.torch import load_file

    cfg = json.loads((Path(path) / "config.json").read_text())
    draft = Eagle3Draft(cfg)
    state = {k: v.float() for k, v in load_file(str(Path(path) / "model.safetensors")).items()
             if k not in ("d2t", "t2d")}
    draft.load_state_dict(state)
    return draft, cfg


def aux_hooks(target: nn.Module, layer_ids: list[int]) -> list[torch.Tensor]:
    """Record the outputs of the target's layers `layer_ids` on every forward (SGLang captures the
    input of layer id + 1, the same tensor). Returns the list the hooks fill (cleared per forward by
    the caller)."""
    store: list[torch.Tensor] = []
    for i in layer_ids:
        target.model.layers[i].register_forward_hook(
            lambda _m, _a, out: store.append(out[0] if isinstance(out, tuple) else out)
        )
    return store


def write_byte_tokenizer(directory: Path) -> None:
    """The byte-level tokenizer of ../shared/gpu/prep_models.py (`--tokenizer bytes`): 5 special tokens,
    then the 256 ByteLevel characters in sorted order, no merges, and an im_start/im_end chat template.
    For tests and for machines without the devbundle."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import ByteLevel

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = ByteLevel(trim_offsets=False)
    tok.add_special_tokens(specials)
    tok.save(str(directory / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor "
                "%}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
        "pad_token": "<|pad|>", "model_max_length": 8192, "clean_up_tokenization_spaces": False,
        "chat_template": template}, indent=1))
