"""EAGLE-3 checkpoint layout facts shared by the preflight rules of every engine."""

from __future__ import annotations


def default_aux_ids(num_layers: int) -> list[int]:
    """SpecForge's training default in output-of-layer convention; SGLang captures these without ids."""
    return [1, num_layers // 2 - 1, num_layers - 4]
