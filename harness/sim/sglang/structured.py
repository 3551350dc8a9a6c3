"""Structured output in the stand-in: a request with `response_format` json_object / json_schema answers with
JSON that satisfies it, token by token (the grammar allows one token at each step, so there are no ties).

SGLang turns `response_format` into a `json_schema` sampling parameter (json_object: '{"type": "object"}');
the stand-in fills the schema it understands: object properties (every one), strings (a few words), numbers,
integers, booleans, null, enums (the first value), arrays (one item). `regex` and `ebnf` are accepted and not
enforced. A wrong draft token of the broken verify path (harness.sim.sglang.numerics) ignores the grammar:
it writes a quote where the grammar wants something else, and the JSON no longer parses.
"""

from __future__ import annotations

import json
from typing import Any

from harness.sim.sglang import model

WRONG_TEXT = '"'  # what a wrong draft token writes into structured output


def schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a chat/completions body constrains its answer to, or None."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else {}
    return None


def json_tokens(schema: dict[str, Any], prompt_key: int) -> list[str]:
    """The answer's token texts: JSON satisfying `schema`, its words drawn from the prompt key."""
    out: list[str] = []
    _value(schema or {"type": "object"}, prompt_key, out, 0)
    return out


def _words(key: int, n: int) -> list[str]:
    return [" " + model.WORDS[model.stable_hash(key, i) % len(model.WORDS)] for i in range(n)]


def _value(schema: dict[str, Any], key: int, out: list[str], depth: int) -> None:
    if "enum" in schema and schema["enum"]:
        out.append(json.dumps(schema["enum"][0]))
        return
    if "const" in schema:
        out.append(json.dumps(schema["const"]))
        return
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or ({"answer": {"type": "string"}} if depth == 0 else {})
        out.append("{")
        for i, (name, sub) in enumerate(props.items()):
            out += ([", "] if i else []) + [json.dumps(name), ": "]
            _value(sub if isinstance(sub, dict) else {}, model.stable_hash(key, name), out, depth + 1)
        out.append("}")
    elif kind == "array":
        out.append("[")
        _value(schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"},
               model.stable_hash(key, "item"), out, depth + 1)
        out.append("]")
    elif kind == "integer":
        out.append(str(key % 100))
    elif kind == "number":
        out.append(f"{key % 1000 / 10:.1f}")
    elif kind == "boolean":
        out.append("true" if key & 1 else "false")
    elif kind == "null":
        out.append("null")
    else:  # string, or a schema without a type
        out += ['"', *(w.lstrip() if i == 0 else w for i, w in enumerate(_words(key, 2 + key % 4))), '"']


def wrong_text(expected: str) -> str:
    """A grammar-breaking token in place of `expected`."""
    return WRONG_TEXT if expected != WRONG_TEXT else '",,'
