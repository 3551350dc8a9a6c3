"""Drafter checkpoint checks from config.json dicts and safetensors headers only (REFERENCE §5.3, §6).

Pure functions: the caller fetches the files (harness.checks.remote) and passes what it found. The shapes
are every engine's business; a release's own limits (SGLang before 0.5.12: one layer, three aux layers) are
its engine's (`Engine.checkpoint_findings`), judged against that engine's version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.common.findings import Finding, error
from harness.common.safetensors_io import TensorInfo


@dataclass(frozen=True)
class DrafterFacts:
    """What was read of one drafter directory on the target."""

    path: str  # as resolved on the target
    config: dict[str, Any] | None = None
    tensors: dict[str, TensorInfo] | None = None  # merged over every shard; None when unreadable
    problem: str | None = None  # why config or weights could not be read


def text_config(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """The language-model part of a config (multimodal targets nest it under text_config)."""
    if not cfg:
        return {}
    for key in ("text_config", "language_config"):
        if isinstance(cfg.get(key), dict):
            return {**cfg, **cfg[key]}
    return cfg


def aux_layer_ids(cfg: dict[str, Any] | None) -> list[Any] | None:
    eagle = (cfg or {}).get("eagle_config")
    if isinstance(eagle, dict) and eagle.get("eagle_aux_hidden_state_layer_ids") is not None:
        ids = eagle["eagle_aux_hidden_state_layer_ids"]
        return list(ids) if isinstance(ids, list | tuple) else [ids]
    return None


def archs(cfg: dict[str, Any] | None) -> list[str]:
    archs = (cfg or {}).get("architectures") or []
    return [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]


def eagle3_evidence(cfg: dict[str, Any] | None, tensors: dict[str, TensorInfo] | None) -> list[str]:
    """Why the files look like an EAGLE-3 drafter (empty when they do not)."""
    found = []
    arch = next((a for a in archs(cfg) if "eagle3" in a.lower()), None)
    if arch:
        found.append(f"config.json names {arch}")
    if isinstance((cfg or {}).get("eagle_config"), dict):
        found.append("config.json has eagle_config")
    maps = [n for n in ("d2t", "t2d") if tensors and n in tensors]
    if maps:
        found.append(f"its weights have {'/'.join(maps)}")
    return found


def drafter_kind(cfg: dict[str, Any] | None, tensors: dict[str, TensorInfo] | None) -> str:
    """ "eagle3", "eagle2" or "unknown", from the architecture name, eagle_config and tensor names."""
    if eagle3_evidence(cfg, tensors):
        return "eagle3"
    if any("eagle" in a.lower() for a in archs(cfg)):
        return "eagle2"
    fc = (tensors or {}).get("fc.weight")
    hidden = (cfg or {}).get("hidden_size")
    if fc is not None and len(fc.shape) == 2 and hidden and fc.shape[1] == 2 * hidden:
        return "eagle2"  # EAGLE(-2) fc takes concat(embedding, hidden): 2H wide
    return "unknown"


def is_eagle3_head(facts: DrafterFacts) -> bool:
    """True when the files read look like an EAGLE-3 head (its shape rules apply)."""
    return facts.config is not None and drafter_kind(facts.config, facts.tensors) == "eagle3"


def check_shapes(variant: str, facts: DrafterFacts, target_cfg: dict[str, Any] | None) -> list[Finding]:
    """EAGLE-3 drafter config and tensor shapes against the target's config (REFERENCE §6.3)."""
    cfg, tensors = facts.config, facts.tensors
    if cfg is None or not is_eagle3_head(facts):  # (cfg is None: not a head, said for the reader's types)
        return []
    out: list[Finding] = []
    tgt = text_config(target_cfg)
    H = cfg.get("hidden_size")
    Ht, V = tgt.get("hidden_size"), tgt.get("vocab_size")
    ids = aux_layer_ids(cfg)
    n_aux = len(ids) if ids else 3
    th = cfg.get("target_hidden_size")
    Vdraft = cfg.get("vocab_size")
    Vd = cfg.get("draft_vocab_size")
    trained = _trained_shape(cfg, tensors, n_aux)
    other = f" (it looks trained for a target with {trained})" if trained else ""

    if tensors is not None and Ht and H:
        fc = tensors.get("fc.weight")
        want = (H, n_aux * Ht)
        if fc is None:
            out.append(
                error(
                    variant,
                    "fc-missing",
                    "the drafter has no fc.weight",
                    "SGLang silently skips missing weights: the fc stays uninitialised",
                    "re-export the drafter (SpecForge keeps fc.weight, norm.weight, lm_head.weight, d2t, "
                    "t2d)",
                )
            )
        elif tuple(fc.shape) != want:
            out.append(
                error(
                    variant,
                    "fc-shape",
                    f"fc.weight is {list(fc.shape)}; this target needs [{H}, {n_aux * Ht}] = {n_aux} × {Ht}",
                    f"fc projects the concat of {n_aux} target hidden states of size {Ht}{other}",
                    "use a drafter trained for this target, or serve the target it was trained for",
                )
            )
    if Ht and th is not None and th != Ht:
        out.append(
            error(
                variant,
                "target-hidden-size",
                f"target_hidden_size is {th}, the target's hidden_size is {Ht}",
                f"the drafter expects hidden states of size {th}{other}",
                "use a drafter trained for this target",
            )
        )
    if Ht and H and th is None and H != Ht:
        out.append(
            error(
                variant,
                "hidden-size",
                f"drafter hidden_size {H} differs from the target's {Ht} and no target_hidden_size is set",
                "SGLang shares the target's embedding with the drafter, so the sizes must match",
                "use a drafter trained for this target (or set target_hidden_size and ship embed_tokens)",
            )
        )
    if tensors is not None and th is not None and H and th != H and "embed_tokens.weight" not in tensors:
        out.append(
            error(
                variant,
                "embed-missing",
                f"target_hidden_size {th} ≠ hidden_size {H} but the drafter has no embed_tokens.weight",
                "with different sizes SGLang keeps the drafter's own embedding, which is missing",
                "export the drafter with its embed_tokens.weight",
            )
        )
    if V and Vdraft and Vdraft != V:
        out.append(
            error(
                variant,
                "vocab-size",
                f"drafter vocab_size {Vdraft} ≠ target vocab_size {V}",
                f"token ids mean different things to the two models{other}",
                "use a drafter trained with this target's tokenizer",
            )
        )
    out += _vocab_tensors(variant, tensors, H, Vd or Vdraft, Vdraft, V)
    return out


def _trained_shape(cfg: dict[str, Any], tensors: dict[str, TensorInfo] | None, n_aux: int) -> str:
    """'hidden size X, vocab Y' as the drafter's own shapes say, for messages."""
    parts = []
    fc = (tensors or {}).get("fc.weight")
    ht = cfg.get("target_hidden_size")
    if ht is None and fc is not None and len(fc.shape) == 2 and fc.shape[1] % n_aux == 0:
        ht = fc.shape[1] // n_aux
    if ht:
        parts.append(f"hidden size {ht}")
    if cfg.get("vocab_size"):
        parts.append(f"vocab {cfg['vocab_size']}")
    return ", ".join(parts)


def _vocab_tensors(
    variant: str,
    tensors: dict[str, TensorInfo] | None,
    H: int | None,
    Vd: int | None,
    Vdraft: int | None,
    V: int | None,
) -> list[Finding]:
    if tensors is None or not Vd:
        return []
    out = []
    lm = tensors.get("lm_head.weight")
    if lm is None:
        out.append(
            error(
                variant,
                "lm-head-missing",
                "the drafter has no lm_head.weight",
                "an EAGLE-3 drafter predicts over its own draft vocabulary; without it the head is random",
                "re-export the drafter with lm_head.weight",
            )
        )
    elif H and tuple(lm.shape) != (Vd, H):
        out.append(
            error(
                variant,
                "lm-head-shape",
                f"lm_head.weight is {list(lm.shape)}, draft_vocab_size × hidden_size is [{Vd}, {H}]",
                "SGLang sizes the head from draft_vocab_size: loading fails or drafts wrong tokens",
                "make draft_vocab_size equal the lm_head rows",
            )
        )
    d2t, t2d = tensors.get("d2t"), tensors.get("t2d")
    full = V or Vdraft
    if d2t is None and full and Vd < full:
        out.append(
            error(
                variant,
                "token-map-missing",
                f"draft vocabulary {Vd} < target vocabulary {full} but there is no d2t tensor",
                "draft ids are not mapped back to target ids, so almost no draft is accepted",
                "export the drafter with its d2t/t2d vocab mapping",
            )
        )
    if d2t is not None and tuple(d2t.shape) != (Vd,):
        out.append(
            error(
                variant,
                "d2t-shape",
                f"d2t is {list(d2t.shape)}, draft_vocab_size is {Vd}",
                "d2t holds one target-id offset per draft token",
                "re-export the vocab mapping",
            )
        )
    if t2d is not None and full and tuple(t2d.shape) != (full,):
        out.append(
            error(
                variant,
                "t2d-shape",
                f"t2d is {list(t2d.shape)}, the target vocabulary is {full}",
                "t2d marks which target tokens the drafter can propose; it was built for another vocab",
                "re-export the vocab mapping for this target",
            )
        )
    return out
