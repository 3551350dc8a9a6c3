"""The request fields the lossless audit uses, read from an OpenAI or /generate body into the stand-in's
Req: logprobs (harness.sim.sglang.logprobs), `continue_final_message` (the answer goes on after the final
assistant message, as SGLang's chat template path does: that message's content is the answer's start) and
`response_format` (harness.sim.sglang.structured)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.sim.sglang import logprobs, model, numerics, structured


@dataclass
class Extras:
    prompt_ids: list[int]
    fields: dict[str, Any] = field(default_factory=dict)  # Req fields

    @property
    def top(self) -> int | None:
        return self.fields.get("logprob_top")


def _with_schema(extras: Extras, body: dict[str, Any]) -> Extras:
    schema = structured.schema_of(body)
    if schema is not None:
        key = model.stable_hash(tuple(extras.fields.get("key_ids") or extras.prompt_ids))
        extras.fields["structured"] = structured.json_tokens(schema, key)
    return extras


def chat(body: dict[str, Any], messages: list[dict], vocab: int, num: numerics.Numerics) -> Extras:
    fields: dict[str, Any] = {"logprob_top": logprobs.chat_request_top(body)}
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if body.get("continue_final_message") and last.get("role") == "assistant":
        key_ids = model.chat_prompt_ids(messages[:-1], vocab)
        prefix = str(last.get("content") or "")
        prompt_ids = key_ids + model.tokenize(prefix, vocab)
        got = numerics.resume(num, model.stable_hash(tuple(key_ids)), prefix, vocab)
        if got is not None:  # else not this prompt's answer: the whole is a prompt of its own
            fields.update(key_ids=key_ids, start_index=got[0], path=got[1])
        return _with_schema(Extras(prompt_ids, fields), body)
    return _with_schema(Extras(model.chat_prompt_ids(messages, vocab), fields), body)


def completion(body: dict[str, Any], prompt_ids: list[int]) -> Extras:
    return _with_schema(Extras(prompt_ids, {"logprob_top": logprobs.completion_request_top(body)}), body)


def generate(body: dict[str, Any], prompt_ids: list[int]) -> Extras:
    return Extras(prompt_ids, {"logprob_top": logprobs.generate_request_top(body)})
