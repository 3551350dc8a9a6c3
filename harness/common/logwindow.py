"""One server stats window (a log line of the engine's scheduler), the same type for every engine.

SGLang's `Decode batch` / `Prefill batch` lines (harness.engines.sglang.logline) and vLLM's
`SpecDecoding metrics` / engine stats lines (harness.engines.vllm.logline) both parse into it, so the
runner, the alarms and server_windows.csv never ask which engine wrote the line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogWindow:
    """One scheduler stats line. ``None`` where the line's format has no such field."""

    line: int  # 1-based line number in the source (grep -n numbering)
    time: str  # timestamp as printed, milliseconds kept when present
    kind: str  # "decode" | "prefill"
    running_req: int | None = None
    queue_req: int | None = None
    token_usage: float | None = None  # "token usage", or "full token usage" on hybrid models
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None  # any "<device> graph: True/False"
    gen_throughput: float | None = None
    input_throughput: float | None = None
    num_tokens: int | None = None  # "#token" / "#full token"
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    ranks: str = ""  # e.g. "TP0", "DP1 TP0 EP0"; "" when the prefix has none
    iteration: int | None = None  # N of "Decode batch [N]"
    extra: tuple[tuple[str, str], ...] = ()  # unrecognised (key, value) pairs, in line order
