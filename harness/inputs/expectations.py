"""What a suite prompt's answer must satisfy (`expect:`), and whether a text does.

A prompt may declare `expect: {json: true}` (the answer parses as JSON), `expect: {schema: {...}}` (it
parses and satisfies a JSON schema) and/or `expect: {regex: '...'}` (re.search finds it in the answer;
anchor with ^...$ for the whole). A prompt with an OpenAI `response_format` (json_object, json_schema),
which the replay sends with the request, expects what that format asks unless it says otherwise. The
lossless audit (harness.analysis.lossless) checks that a speculative variant's answer satisfies the
expectation wherever the baseline's does.

The schemas are checked by a small validator of the keywords below (no jsonschema dependency); a keyword it
does not know is an error where the suite declares it, never silently ignored.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from harness.inputs.yamlio import FieldProblem, StrictModel

CHECKED = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "minLength",
           "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems",
           "maxItems", "anyOf", "oneOf", "allOf"}
ANNOTATIONS = {"title", "description", "$schema", "$id", "default", "examples", "format", "$comment"}
TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}


def schema_problem(schema: object, loc: tuple = ()) -> tuple[str, tuple] | None:
    """(message, location) of the first keyword this validator cannot check, or None."""
    if not isinstance(schema, dict):
        return "a schema is a mapping", loc
    for key, value in schema.items():
        if key not in CHECKED and key not in ANNOTATIONS:
            return (f"schema keyword {key!r} is not one draftbench checks (it checks: "
                    f"{', '.join(sorted(CHECKED))})"), (*loc, key)
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or any(k not in TYPES for k in kinds):
                return f"type must be one of {sorted(TYPES)}, got {value!r}", (*loc, key)
        if key == "properties":
            if not isinstance(value, dict):
                return "properties is a mapping of schemas", (*loc, key)
            for name, sub in value.items():
                if found := schema_problem(sub, (*loc, key, name)):
                    return found
        if key in ("items", "additionalProperties") and not isinstance(value, bool):
            if found := schema_problem(value, (*loc, key)):
                return found
        if key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                return f"{key} is a non-empty list of schemas", (*loc, key)
            for i, sub in enumerate(value):
                if found := schema_problem(sub, (*loc, key, i)):
                    return found
        if key == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError) as exc:
                return f"pattern does not compile: {exc}", (*loc, key)
    return None


def _type_ok(kind: str, value: object) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, {"object": dict, "array": list, "string": str, "boolean": bool,
                              "null": type(None)}[kind])


def schema_violation(schema: dict[str, Any], value: object, where: str = "$") -> str | None:
    """The first way `value` fails `schema` (keywords of CHECKED), or None."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_type_ok(k, value) for k in kinds):
            return f"{where}: expected {'/'.join(kinds)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: expected {schema['const']!r}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            return f"{where}: string length {len(value)} out of bounds"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{where}: does not match pattern {schema['pattern']!r}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf) \
                or value <= schema.get("exclusiveMinimum", -math.inf) \
                or value >= schema.get("exclusiveMaximum", math.inf):
            return f"{where}: {value} out of bounds"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                return f"{where}: missing required {name!r}"
        for name, sub in value.items():
            if name in props:
                if found := schema_violation(props[name], sub, f"{where}.{name}"):
                    return found
            elif schema.get("additionalProperties") is False:
                return f"{where}: unexpected property {name!r}"
            elif isinstance(schema.get("additionalProperties"), dict):
                if found := schema_violation(schema["additionalProperties"], sub, f"{where}.{name}"):
                    return found
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
            return f"{where}: {len(value)} items out of bounds"
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                if found := schema_violation(schema["items"], item, f"{where}[{i}]"):
                    return found
    for sub in schema.get("allOf") or []:
        if found := schema_violation(sub, value, where):
            return found
    if schema.get("anyOf") and all(schema_violation(s, value, where) for s in schema["anyOf"]):
        return f"{where}: matches none of anyOf"
    if schema.get("oneOf") and sum(schema_violation(s, value, where) is None for s in schema["oneOf"]) != 1:
        return f"{where}: does not match exactly one of oneOf"
    return None


class Expect(StrictModel):
    """What the prompt's answer must satisfy; at least one of the three."""

    model_config = ConfigDict(populate_by_name=True)

    json_: bool = Field(default=False, alias="json", description="the answer parses as JSON")
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="the answer parses as "
                                           "JSON and satisfies this JSON schema (the keywords of CHECKED)")
    regex: str | None = Field(default=None, min_length=1, description="re.search finds this in the answer")

    @model_validator(mode="after")
    def _valid(self) -> Expect:
        if not self.json_ and self.schema_ is None and self.regex is None:
            raise FieldProblem("give at least one of json: true, schema or regex")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise FieldProblem(f"does not compile: {exc}", ("regex",)) from None
        if self.schema_ is not None and (found := schema_problem(self.schema_)):
            raise FieldProblem(found[0], ("schema", *found[1]))
        return self

    @model_serializer(mode="wrap")
    def _by_alias(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped under the names a suite writes (json, schema): plan.resolved.json reads back as written."""
        return {{"json_": "json", "schema_": "schema"}.get(k, k): v for k, v in handler(self).items()}

    def violation(self, text: str) -> str | None:
        """How `text` fails the expectation (a few words), or None when it satisfies it."""
        if self.json_ or self.schema_ is not None:
            try:
                value = json.loads(text)
            except ValueError as exc:
                return f"not JSON: {exc}"
            if self.schema_ is not None and (found := schema_violation(self.schema_, value)):
                return f"schema: {found}"
        if self.regex is not None and re.search(self.regex, text) is None:
            return f"no match for regex {self.regex!r}"
        return None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=True)


def check_response_format(fmt: dict[str, Any]) -> tuple[str, tuple] | None:
    """(message, location) of what is wrong with an OpenAI response_format, or None."""
    kind = fmt.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        return f"type must be text, json_object or json_schema, got {kind!r}", ("type",)
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            return ("json_schema needs a mapping with a 'schema' (OpenAI: {name, schema, strict})",
                    ("json_schema",))
        if found := schema_problem(spec["schema"], ("json_schema", "schema")):
            return found
    return None


def implied(fmt: dict[str, Any] | None) -> Expect | None:
    """What a response_format asks of the answer (json_object: JSON; json_schema: its schema)."""
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return Expect(json=True)
    return Expect(schema=(fmt.get("json_schema") or {}).get("schema") or {})
