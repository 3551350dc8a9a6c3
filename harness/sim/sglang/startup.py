"""What happens between ``server_args=...`` and ``ready to roll``: model/draft inspection, the memory plan,
the start-up log sequence of the H200 captures, and the start-up crashes a misconfigured EAGLE server has."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.sim.sglang.fixtures import ACCEPTANCE_FILE

GPU_TOTAL_GB = 139.13  # "avail mem" an idle H200 reports before loading
POOL_OVERHEAD_GB = 0.65
# A decent trained drafter, used when a draft directory has no acceptance.json (e.g. a real checkpoint).
DEFAULT_PROFILE = (0.8, 0.7, 0.62, 0.55, 0.48, 0.42, 0.36, 0.3)


class SchedulerCrash(Exception):
    """A failure inside the (simulated) scheduler process: logged as SGLang does, then the server dies."""

    def __init__(self, frames: list[tuple[str, int, str, str]], exc_line: str):
        super().__init__(exc_line)
        self.frames = frames
        self.exc_line = exc_line

    def text(self, site: str) -> str:
        lines = ["Traceback (most recent call last):"]
        for file, line, func, code in self.frames:
            path = file if file.startswith("torch/") else f"sglang/srt/{file}"
            lines += [f'  File "{site}/{path}", line {line}, in {func}', f"    {code}"]
        return "\n".join(lines + [self.exc_line]) + "\n"


_DRAFT_INIT = [
    ("managers/scheduler.py", 4325, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 424, "__init__", "self.init_model_worker()"),
    ("managers/scheduler.py", 868, "init_model_worker", "self.maybe_init_draft_worker()"),
    (
        "managers/scheduler.py",
        818,
        "maybe_init_draft_worker",
        "self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)",
    ),
    ("speculative/eagle_worker_v2.py", 1074, "__init__", "self._draft_worker = EagleDraftWorker("),
]


def no_draft_vocab_size() -> SchedulerCrash:
    """The captured crash (captures/failed/server-eagle3-no-draft-vocab-size.log)."""
    return SchedulerCrash(
        _DRAFT_INIT
        + [
            ("speculative/eagle_worker_v2.py", 179, "__init__", "self.draft_worker = TpModelWorker("),
            ("managers/tp_worker.py", 273, "__init__", "self._init_model_runner()"),
            ("model_executor/model_runner.py", 702, "initialize", "self.load_model()"),
            ("model_loader/loader.py", 320, "_initialize_model", "return model_class(**kwargs)"),
            ("models/llama_eagle3.py", 278, "__init__", "if config.draft_vocab_size is None:"),
        ],
        "AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size'",
    )


def target_as_draft(arch: str) -> SchedulerCrash:
    """EAGLE without a draft path on a target that bundles none (sglang issue #36528)."""
    return SchedulerCrash(
        _DRAFT_INIT
        + [
            ("speculative/eagle_worker_v2.py", 214, "__init__", "self.init_lm_head()"),
            (
                "speculative/eagle_worker_v2.py",
                262,
                "init_lm_head",
                "if self.draft_runner.model.hot_token_id is not None:",
            ),
        ],
        f"AttributeError: '{arch}' object has no attribute 'hot_token_id'",
    )


def fc_shape_error(
    tokens: int, fed: int, fc_in: int, hidden: int, eagle3_model: bool, capturing: bool = True
) -> SchedulerCrash:
    """The draft's fc cannot take what the target sends (EAGLE-2 draft under EAGLE3, or hidden sizes differ):
    during the draft-extend graph capture, or at the first forward when graphs are off."""
    where = (
        ("models/llama_eagle3.py", 221, "forward", "hidden_states = self.fc(hidden_states)")
        if eagle3_model
        else ("models/llama_eagle.py", 97, "forward", "hidden_states = self.fc(")
    )
    if capturing:
        head = [
            ("managers/scheduler.py", 4325, "run_scheduler_process", "scheduler = Scheduler("),
            (
                "speculative/eagle_worker_v2.py",
                236,
                "init_cuda_graphs",
                "self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner(",
            ),
            (
                "speculative/eagle_draft_extend_cuda_graph_runner.py",
                187,
                "capture",
                "self.capture_one_batch_size(bs, forward)",
            ),
        ]
    else:
        head = [
            ("managers/scheduler.py", 4337, "run_scheduler_process", "scheduler.event_loop_overlap()"),
            ("managers/scheduler.py", 1412, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            (
                "speculative/eagle_worker_v2.py",
                1162,
                "forward_batch_generation",
                "self._draft_worker._draft_extend_for_prefill(model_worker_batch, batch_output)",
            ),
            (
                "speculative/eagle_worker_v2.py",
                521,
                "_draft_extend_for_prefill",
                "logits_output = self.draft_runner.forward(forward_batch).logits_output",
            ),
        ]
    return SchedulerCrash(
        head
        + [
            where,
            ("torch/nn/modules/linear.py", 134, "forward", "return F.linear(input, self.weight, self.bias)"),
        ],
        f"RuntimeError: mat1 and mat2 shapes cannot be multiplied ({tokens}x{fed} and {fc_in}x{hidden})",
    )


def fc_mismatch(
    algo: str, target: dict[str, Any], draft: dict[str, Any], draft_arch: str
) -> tuple[int, int, int] | None:
    """(columns fed, fc input width, draft hidden) when the draft's first fc cannot run, else None.

    EAGLE3 makes the target send its aux hidden states concatenated (n_aux x target hidden); EAGLE sends one.
    An EAGLE-3 model skips its fc when the width already equals its hidden size (the silent wrong-flag case);
    an EAGLE(-2) model always runs fc over [embeddings; hidden].
    """
    ht = int(target.get("hidden_size", 4096))
    h = int(draft.get("hidden_size", ht))
    if "Eagle3" in draft_arch:
        ids = (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0]
        fc_in = len(ids) * int(draft.get("target_hidden_size", h))
        fed = len(ids) * ht if algo == "EAGLE3" else ht
        return None if fed in (h, fc_in) else (fed, fc_in, h)
    fed = h + (3 * ht if algo == "EAGLE3" else ht)
    return None if fed == 2 * h else (fed, 2 * h, h)


def read_config(path: str, what: str) -> dict[str, Any]:
    """config.json of a model directory, or the OSError transformers raises for a missing one."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise OSError(
            f"{path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{path}/tree/main' for available files."
        )
    try:
        data = json.loads(cfg.read_text())
    except json.JSONDecodeError as e:
        raise OSError(f"It looks like the config file at '{cfg}' is not a valid JSON file.") from e
    if not isinstance(data, dict):
        raise OSError(f"{what} config at '{cfg}' is not a JSON object.")
    return data


def generation_config_warning(path: str) -> str | None:
    """``get_generation_config``'s warning for a local model directory without generation_config.json
    (EAGLE-3 drafts ship none), or None when the file is there."""
    if (Path(path) / "generation_config.json").is_file():
        return None
    return (
        f"Failed to load generation config for {path}: {path} does not appear to have a file named "
        f"generation_config.json. Checkout 'https://huggingface.co/{path}/tree/main' for available files.. "
        "Proceeding without generation config."
    )


@dataclass(frozen=True)
class Draft:
    path: str
    config: dict[str, Any]
    per_position: tuple[float, ...]
    # acceptance.json's `by_content`: (words, profile) rules; a request whose user text holds one of the words
    # takes that profile (the first rule that matches): a drafter weak on one kind of prompt
    by_content: tuple[tuple[tuple[str, ...], tuple[float, ...]], ...] = ()

    @property
    def arch(self) -> str:
        return str((self.config.get("architectures") or ["LlamaForCausalLM"])[0])


def read_draft(path: str) -> Draft:
    cfg = read_config(path, "draft")
    acc = Path(path) / ACCEPTANCE_FILE
    profile, rules = DEFAULT_PROFILE, ()
    if acc.is_file():
        data = json.loads(acc.read_text())
        profile = _probabilities(data.get("per_position"), f"{acc}: per_position")
        rules = tuple((_words(r, f"{acc}: by_content[{i}]"), _probabilities(
            r.get("per_position"), f"{acc}: by_content[{i}].per_position")) for i, r in enumerate(
            data.get("by_content") or []))
    return Draft(path, cfg, profile, rules)


def _probabilities(raw: Any, where: str) -> tuple[float, ...]:
    if not isinstance(raw, list) or not all(isinstance(p, int | float) and 0 <= p <= 1 for p in raw):
        raise ValueError(f"{where} must be a list of probabilities in [0, 1]")
    return tuple(float(p) for p in raw)


def _words(rule: Any, where: str) -> tuple[str, ...]:
    words = rule.get("contains") if isinstance(rule, dict) else None
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise ValueError(f"{where}.contains must be a non-empty list of words")
    return tuple(w.lower() for w in words)


def param_count(cfg: dict[str, Any]) -> float:
    H = int(cfg.get("hidden_size", 4096))
    L = int(cfg.get("num_hidden_layers", 32))
    nh = int(cfg.get("num_attention_heads", 32))
    nkv = int(cfg.get("num_key_value_heads", nh))
    hd = int(cfg.get("head_dim") or H // nh)
    inter = int(cfg.get("intermediate_size", 4 * H))
    V = int(cfg.get("vocab_size", 32000))
    per_layer = H * nh * hd * 2 + 2 * H * nkv * hd + 3 * H * inter
    return L * per_layer + V * H * (1 if cfg.get("tie_word_embeddings") else 2)


def kv_bytes_per_token(cfg: dict[str, Any], tp: int) -> int:
    L = int(cfg.get("num_hidden_layers", 32))
    if "kv_lora_rank" in cfg:  # MLA: one latent vector per token and layer, not sharded
        return L * (int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 64))) * 2
    nh = int(cfg.get("num_attention_heads", 32))
    nkv = max(1, int(cfg.get("num_key_value_heads", nh)) // tp)
    hd = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 4096)) // nh)
    return 2 * L * nkv * hd * 2


@dataclass(frozen=True)
class MemoryPlan:
    weight_gb: float
    draft_weight_gb: float
    max_total_tokens: int
    k_gb: float
    draft_k_gb: float
    graph_gb: float

    def avail_after_pool(self) -> float:
        return (
            GPU_TOTAL_GB
            - self.weight_gb
            - self.draft_weight_gb
            - 2 * (self.k_gb + self.draft_k_gb)
            - POOL_OVERHEAD_GB
        )


def memory_plan(
    target: dict[str, Any], draft: dict[str, Any] | None, mem_fraction: float, tp: int, graphs: bool
) -> MemoryPlan:
    weight = param_count(target) * 2 / 2**30 / tp
    draft_w = param_count(draft) * 2 / 2**30 / tp if draft else 0.0
    per_tok = kv_bytes_per_token(target, tp)
    draft_tok = kv_bytes_per_token(draft, tp) if draft else 0
    budget = max(0.5, GPU_TOTAL_GB * mem_fraction - weight - draft_w)
    tokens = int(budget * 2**30 / (per_tok + draft_tok))
    return MemoryPlan(
        round(weight, 2),
        round(draft_w, 2),
        tokens,
        tokens * per_tok / 2 / 2**30,
        tokens * draft_tok / 2 / 2**30,
        (0.1 if draft else 0.04) if graphs else 0.0,
    )


def tqdm_bar(bs_list: list[int], avail: float, seconds: float) -> str:
    """The carriage-return progress output of SGLang's graph capture (one raw write ending in a newline)."""
    n = len(bs_list)
    parts = [f"\r  0%|          | 0/{n} [00:00<?, ?it/s]"]
    for i, bs in enumerate(sorted(bs_list, reverse=True), start=1):
        pct = int(100 * i / n)
        bar = ("█" * (pct // 10)).ljust(10)
        parts.append(
            f"\rCapturing batches (bs={bs} avail_mem={avail:.2f} GB): {pct:3d}%|{bar}| {i}/{n} "
            f"[00:{min(59, int(seconds * i / n)):02d}<00:00, {seconds / n:.2f}s/it]"
        )
    return "".join(parts)


def site_dir() -> str:
    return os.environ.get("DRAFTBENCH_SIM_SITE", "/usr/local/lib/python3.12/dist-packages")
