"""The words of a config error: a pydantic error on a field turned into one plain line ("unknown field
'num_step' (did you mean 'num_steps'?)", "expected an integer, got 'eight'"). harness.inputs.yamlio puts
the file and line in front.
"""

from __future__ import annotations

import difflib
import types
import typing

from pydantic import BaseModel
from pydantic_core import ErrorDetails

PathPart = str | int


def describe(value: object) -> str:
    """A short, plain description of a YAML value for messages."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    return repr(value)


_TYPE_WORDS = {
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "an integer"),
    **dict.fromkeys(("float_type", "float_parsing"), "a number"),
    **dict.fromkeys(("bool_type", "bool_parsing"), "true or false"),
    **dict.fromkeys(("list_type", "tuple_type"), "a list"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "a mapping (key: value)"),
    "string_type": "a string",
}


def field_message(model_cls: type[BaseModel], loc: tuple[PathPart, ...], err: ErrorDetails) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        allowed = _allowed_fields(model_cls, loc[:-1])
        # a plan's old spelling of a moved field (Target.moved_keys) is still a good guess for a misspelling
        guesses = allowed + list(getattr(model_at(model_cls, loc[:-1]), "moved_keys", {}))
        close = difflib.get_close_matches(name, guesses, n=1, cutoff=0.6)
        hint = (
            f" (did you mean {close[0]!r}?)"
            if close
            else (f"; allowed: {', '.join(allowed)}" if allowed else "")
        )
        return f"unknown field {name!r}{hint}"
    if kind == "missing":
        return f"missing required field {str(loc[-1])!r}" if loc else "missing required field"
    if kind in _TYPE_WORDS:
        msg = f"expected {_TYPE_WORDS[kind]}, got {describe(value)}"
        if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
            msg += f" (put it in quotes: '{value}')"
        elif kind == "list_type" and isinstance(value, str):
            msg += " (write one item per '- ' line, or [a, b] on one line)"
        return msg
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {
            "greater_than": ("greater than", "gt"),
            "greater_than_equal": ("at least", "ge"),
            "less_than": ("less than", "lt"),
            "less_than_equal": ("at most", "le"),
        }[kind]
        return f"must be {words[0]} {_num(ctx.get(words[1]))}, got {describe(value)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected', '?')}, got {describe(value)}"
    if kind in ("too_short", "too_long"):
        if kind == "too_short" and ctx.get("min_length") == 1:
            return "must not be empty"
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        return f"must have {'at least' if kind == 'too_short' else 'at most'} {bound} item(s)"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"{describe(value)} does not match the pattern {ctx.get('pattern')}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _num(v: object) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _allowed_fields(model_cls: type[BaseModel], loc: tuple[PathPart, ...]) -> list[str]:
    """Field names of the model found at `loc` inside `model_cls` (empty when not a model)."""
    tp = model_at(model_cls, loc)
    return list(tp.model_fields) if tp is not None else []


def model_at(model_cls: object, loc: tuple[PathPart, ...]) -> type[BaseModel] | None:
    """The model class found at `loc` inside the type `model_cls` (None when that place is not a model)."""
    tp = model_cls
    for part in loc:
        tp = child_type(tp, part)
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def child_type(tp: object, part: PathPart) -> object:
    """The type declared one step below `tp`: a model's field, a list's item, a dict's value (or None)."""
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(part) if isinstance(part, str) else None
        return field.annotation if field is not None else None
    args = typing.get_args(tp)
    return args[-1] if args else None  # list[X] -> X, dict[K, V] -> V


def _unwrap(tp: object) -> object:
    """Strip Annotated and `X | None` down to the one non-None member, where there is one."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
            if len(models) == 1:
                return models[0]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp
