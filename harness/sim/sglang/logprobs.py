"""Logprobs as SGLang 0.5.15 returns them, and the request fields that ask for them (pure).

- /generate, `return_logprob` (+ `top_logprobs_num`, `return_text_in_logprobs`): meta_info gets
  `input_token_logprobs` / `output_token_logprobs` as [logprob, token id, text or None] (tokenizer_manager's
  detokenize_logprob_tokens; text only with return_text_in_logprobs) and, with top_logprobs_num > 0,
  `input_top_logprobs` / `output_top_logprobs` (one list per position, None where empty); with the default
  logprob_start_len -1 the input side is the last prompt token alone, its logprob None. The lists are the
  request's whole so far on every chunk (state accumulates them).
- /v1/chat/completions, `logprobs: true` (+ `top_logprobs`): choices[i].logprobs = {"content": [{"token",
  "bytes", "logprob", "top_logprobs": [{"token", "bytes", "logprob"}]}]} (serving_chat's
  _process_logprobs_tokens: bytes are the token text's UTF-8, the alternatives a {text: logprob} dict first,
  so two with one text collapse); streaming chunks carry the entries of their own tokens.
- /v1/completions, `logprobs: N`: choices[i].logprobs = LogProbs {"text_offset" (-1 each: "not supported
  yet"), "token_logprobs", "tokens", "top_logprobs": [{text: logprob}]}.
An entry's text is what decoding its token alone gives (`decoded`): a multi-byte character's pieces read
as U+FFFD, the end-of-sequence token as its special text.
"""

from __future__ import annotations

from typing import Any

from harness.sim.sglang.model import SPLIT_CHAR

Entry = tuple[int, str, float, tuple]  # (token id, decoded text, logprob, top: ((id, text, logprob), ...))
EOS_TEXT = "<|eot_id|>"  # batch_decode keeps special tokens


def decoded(text: str) -> str:
    """A token's text as the tokenizer decodes it alone (the engine's text: "" for a held-back piece)."""
    if not text:
        return "\ufffd"
    return "\ufffd" + text[1:] if text.startswith(SPLIT_CHAR) else text


def top_count(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def chat_request_top(body: dict[str, Any]) -> int | None:
    """The alternatives a chat request asks for (None: no logprobs)."""
    return top_count(body.get("top_logprobs")) if body.get("logprobs") else None


def completion_request_top(body: dict[str, Any]) -> int | None:
    value = body.get("logprobs")
    return None if value is None or value is False else top_count(value)


def generate_request_top(body: dict[str, Any]) -> int | None:
    return top_count(body.get("top_logprobs_num")) if body.get("return_logprob") else None


def meta_fields(entries: list[Entry], last_prompt_id: int, top_n: int, with_text: bool) -> dict[str, Any]:
    """The logprob keys of /generate's meta_info, in tokenizer_manager's order."""
    def one(tid: int, text: str, lp: float | None) -> list[Any]:
        return [lp, tid, text if with_text else None]

    out: dict[str, Any] = {
        "input_token_logprobs": [[None, last_prompt_id, None]],
        "output_token_logprobs": [one(tid, text, lp) for tid, text, lp, _ in entries],
    }
    if top_n > 0:
        out["input_top_logprobs"] = [None]
        out["output_top_logprobs"] = [[one(t, x, lp) for t, x, lp in top] or None for *_, top in entries]
    return out


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def chat_content(entries: list[Entry]) -> dict[str, Any]:
    """ChoiceLogprobs of these tokens."""
    content = []
    for _, token, lp, top in entries:
        alts = {t: a for _, t, a in top}
        content.append({"token": token, "bytes": _bytes(token), "logprob": lp,
                        "top_logprobs": [{"token": t, "bytes": _bytes(t), "logprob": a}
                                         for t, a in alts.items()]})
    return {"content": content}


def completion_logprobs(entries: list[Entry], top_n: int) -> dict[str, Any]:
    """LogProbs of these tokens (completions; no alternatives asked: an empty top_logprobs)."""
    return {
        "text_offset": [-1] * len(entries),
        "token_logprobs": [lp for _, _, lp, _ in entries],
        "tokens": [text for _, text, _, _ in entries],
        "top_logprobs": [{t: a for _, t, a in top} for *_, top in entries] if top_n > 0 else [],
    }
