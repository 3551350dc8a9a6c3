"""SPEED-Bench (nvidia/SPEED-Bench, arXiv 2604.09557) rows as suite prompts: the shared speculative-decoding
dataset of vLLM, SGLang, AIPerf and InferenceX.

Its rows (the `qualitative` config and the `throughput_1k` ... `throughput_32k` configs, as JSON Lines, e.g.
`datasets.load_dataset("nvidia/SPEED-Bench", "qualitative", split="test").to_json("qualitative.jsonl")`) are

    {"question_id": str, "category": str, "sub_category": str, "turns": [str, ...], "source": str,
     "src_id": str, "difficulty": str, "multiturn": bool}

`category` is one of eleven domains in `qualitative` (coding, humanities, math, multilingual, qa, rag,
reasoning, roleplay, stem, summarization, writing) and the entropy tier (low_entropy, mixed, high_entropy) in
the throughput configs, whose prompts are about 1k to 32k tokens long (the context-length axis). Rows built
from other datasets ship with a placeholder in place of their text ("FULL BENCHMARK DATA SHOULD BE FETCHED
FROM THE SOURCE USING SPECDEC_BENCH ..."): NVIDIA's specdec_bench `prepare_data.py` fills them in. A
placeholder is never replayed as a prompt: such rows are dropped and counted, with that fix.
"""

from __future__ import annotations

from harness.common.errors import InputError

PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
MARKERS = ("sub_category", "src_id", "multiturn", "difficulty")  # keys only SPEED-Bench rows carry
UNRESOLVED = ("rows whose turns are SPEED-Bench placeholders (resolve them first with NVIDIA specdec_bench's "
              "prepare_data.py)")


def is_speed_bench(row: object) -> bool:
    return isinstance(row, dict) and "turns" in row and any(k in row for k in MARKERS)


def row_turns(row: object, src: str, lineno: int) -> tuple[str, str, list[str]] | None:
    """(question_id, category, user turns) of a row; None for a row whose text is still a placeholder."""
    if not isinstance(row, dict):
        raise InputError(src, lineno, None, "expected a JSON object with question_id, category and turns")
    qid = row.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, int | str) or qid == "":
        raise InputError(src, lineno, "question_id", "missing" if qid is None else
                         f"expected a string or an integer, got {qid!r:.60}")
    category = row.get("category", "general")
    if not isinstance(category, str) or not category:
        raise InputError(src, lineno, "category", f"expected a non-empty string, got {category!r:.60}")
    turns = row.get("turns")
    if not isinstance(turns, list) or not turns:
        raise InputError(src, lineno, "turns", "missing" if turns is None else
                         f"expected a non-empty list of strings, got {turns!r:.60}")
    for i, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn.strip():
            raise InputError(src, lineno, f"turns[{i}]", f"expected non-empty text, got {turn!r:.60}")
    if any(t.lstrip().startswith(PLACEHOLDER) for t in turns):
        return None
    return str(qid), category, list(turns)
