"""What a drafters/ file records beyond its path: the target it was trained against (to tell another
generation of the model apart even where every shape matches) and its lineage (each promotion: the data, the
job, the checkpoint and the evaluation run that let it in). Written by `draftbench retrain`
(harness.retrain.promote), read by `check` (harness.checks.compat) and `watch` (harness.retrain.watch)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from harness.inputs.yamlio import StrictModel

# config.json keys that change with the tooling, not with the model: left out of the fingerprint
VOLATILE_KEYS = frozenset({"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
                           "_commit_hash", "_attn_implementation_autoset"})


def _text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "language_config"):  # multimodal targets nest the language model's config
        if isinstance(cfg.get(key), dict):
            return {**cfg, **cfg[key]}
    return cfg


def config_fingerprint(cfg: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of the config's canonical JSON without VOLATILE_KEYS, at every level."""
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    text = json.dumps(strip(cfg), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TrainedAgainst(StrictModel):
    """The target's config.json as it was when the drafter was trained (or registered) against it."""

    architecture: str | None = Field(default=None, description="the target config's architectures[0]")
    hidden_size: int | None = Field(default=None, description="the target's hidden size")
    vocab_size: int | None = Field(default=None, description="the target's vocabulary size")
    num_hidden_layers: int | None = Field(default=None, description="the target's layer count")
    config_sha256: str | None = Field(default=None,
                                      description="config_fingerprint of the target's config.json")

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> TrainedAgainst:
        text = _text_part(cfg)
        arch = (cfg.get("architectures") or text.get("architectures") or [None])[0]

        def num(key: str) -> int | None:
            v = text.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(architecture=str(arch) if arch else None, hidden_size=num("hidden_size"),
                   vocab_size=num("vocab_size"), num_hidden_layers=num("num_hidden_layers"),
                   config_sha256=config_fingerprint(cfg))

    def differences(self, other: TrainedAgainst) -> list[str]:
        """`field recorded -> now` for every recorded field that differs (a field not recorded is skipped)."""
        out = []
        for key in ("architecture", "hidden_size", "vocab_size", "num_hidden_layers", "config_sha256"):
            mine, theirs = getattr(self, key), getattr(other, key)
            if mine is not None and theirs is not None and mine != theirs:
                out.append(f"{key} {mine} -> {theirs}")
        return out


class LineageEntry(StrictModel):
    """One promotion: what replaced what, on which evidence."""

    promoted_at: str = Field(description="when (ISO 8601)")
    path: str = Field(description="the checkpoint directory promoted (on the target)")
    previous_path: str | None = Field(default=None, description="the drafter's path before this promotion")
    data_manifest: str | None = Field(default=None,
                                      description="manifest of the training data (where each row came from)")
    training_data: str | None = Field(default=None, description="the training JSONL")
    job: str | None = Field(default=None, description="the training job's id (draftbench jobs)")
    checkpoint: str | None = Field(default=None,
                                   description="the checkpoint the job saved (before any export)")
    evaluation_run: str | None = Field(default=None, description="the run directory of the paired evaluation")
    profile: str | None = Field(default=None,
                                description="speculation_profile.json of that run (what watch compares)")
    rule: str | None = Field(default=None,
                             description="the promotion rule: faster, or faster-or-equivalent-higher-accept")
    verdicts: list[str] = Field(default_factory=list,
                                description="the verdict against the drafter it replaced, per concurrency")
    retrain_id: str | None = Field(default=None, description="the `draftbench retrain` loop that produced it")
