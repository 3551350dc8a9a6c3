"""YAML loading with a line map, and pydantic errors turned into one-line `InputError`s (their wording:
harness.inputs.field_messages).

`load_yaml` composes the YAML node graph first so that every mapping key and sequence item keeps
its line, refuses duplicate keys (PyYAML would silently keep the last), then constructs plain data
with the safe constructor. `validate` runs a pydantic model on that data and reports the first
problem in file order as `FILE:LINE: FIELD: message`. `StrictModel` is the base of every config model.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import ErrorDetails
from yaml.constructor import SafeConstructor

from harness.common.errors import InputError
from harness.inputs.field_messages import PathPart, child_type, field_message, model_at

MAX_FILE_BYTES = 64 * 1024 * 1024  # far above any real plan or suite; stops a stray multi-GB file early
MAX_DEPTH = 100  # plans nest 4 levels; this only guards against crafted input
MAX_EXPANSION = 10  # aliases may make a document at most this many times its own size ...
MIN_EXPANDED = 1 << 20  # ... or 1 MiB, whichever is larger (and never past MAX_FILE_BYTES)

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: MB-sized suites
M = TypeVar("M", bound=BaseModel)


class FieldProblem(ValueError):
    """Raised inside validators to place an error below the model's own location (`loc` relative)."""

    def __init__(self, message: str, loc: Sequence[PathPart] = ()):
        super().__init__(message)
        self.loc = tuple(loc)


class LineMap:
    """Maps data paths such as ("variants", 1, "num_steps") to 1-based line numbers."""

    def __init__(self, lines: dict[tuple[PathPart, ...], int] | None = None):
        self._lines: dict[tuple[PathPart, ...], int] = dict(lines or {})

    def set(self, path: tuple[PathPart, ...], line: int) -> None:
        self._lines.setdefault(path, line)

    def line_of(self, path: Sequence[PathPart]) -> int | None:
        """Line of `path`, or of its nearest ancestor that has one (None for an empty document)."""
        key = tuple(path)
        while True:
            if key in self._lines:
                return self._lines[key]
            if not key:
                return None
            key = key[:-1]


def format_field(path: Sequence[PathPart]) -> str | None:
    """("variants", 1, "num_steps") -> "variants[1].num_steps"; () -> None."""
    out = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
    return out.removeprefix(".") or None


def read_text(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Read a file as strict UTF-8 (a leading BOM is dropped); every failure is an InputError."""
    src, p = str(path), Path(path)
    try:
        if p.is_dir():
            raise InputError(src, None, None, "is a directory, expected a file")
        if (size := p.stat().st_size) > max_bytes:
            raise InputError(src, None, None, f"file is {size:,} bytes, over the {max_bytes:,}-byte limit")
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(src, None, None, "file not found") from None
    except OSError as exc:
        raise InputError(src, None, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - raw.rfind(b"\n", 0, exc.start)
        bad = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {col}); save the file as UTF-8"
        raise InputError(src, line, None, bad) from None


def load_yaml(path: str | Path) -> tuple[Any, LineMap]:
    """Parse one YAML document from `path` into plain data plus its line map."""
    text = read_text(path)
    return parse_yaml(text, str(path))


def parse_yaml(text: str, path: str | None = None) -> tuple[Any, LineMap]:
    """Parse YAML text (`path` only names the source in errors)."""
    loader = _Loader(text)
    try:
        _check_depth(text, path)
        node = loader.get_single_node()
        if node is None:
            return None, LineMap()
        _check_expansion(node, len(text), path)
        lines = LineMap()
        _walk(node, (), lines, path, set(), SafeConstructor())
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:  # scanner, parser and constructor errors all carry marks
        raise InputError(path, *_describe_marked(exc, text)) from None
    except yaml.reader.ReaderError as exc:
        # libyaml counts bytes of the UTF-8 encoding, the pure-python reader counts characters.
        native = _Loader is not yaml.SafeLoader
        before = text.encode()[: exc.position] if native else text[: exc.position].encode()
        reason = f"invalid YAML: {exc.reason} (character {exc.character!r})"
        raise InputError(path, before.count(b"\n") + 1, None, reason) from None
    except yaml.YAMLError as exc:
        raise InputError(path, None, None, f"invalid YAML: {exc}") from None
    except (ValueError, TypeError) as exc:  # a tagged value the constructor cannot build (`!!int abc`)
        raise InputError(path, None, None, f"invalid YAML value: {exc}") from None
    finally:
        loader.dispose()


def _check_depth(text: str, path: str | None) -> None:
    """Refuse absurd nesting before composing: libyaml's composer recurses and can overflow the C stack."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):  # the event parser keeps an explicit stack
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(
                    path, event.start_mark.line + 1, None, f"nested more than {MAX_DEPTH} levels deep"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, text_len: int, path: str | None) -> None:
    """Refuse a document whose aliases expand it far past its own size (a "billion laughs" plan wrote a
    300 MB plan.resolved.json from 1 MB), and one that contains itself. Sizes are counted in scalar
    characters plus one per node, each node once (memoised, iterative: alias chains can be deep)."""
    limit = min(max(MAX_EXPANSION * text_len, MIN_EXPANDED), MAX_FILE_BYTES)
    size: dict[int, int] = {}
    refs: dict[int, int] = {}
    nodes: dict[int, yaml.Node] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            kids = _children(node)
            size[key] = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode)
                             else sum(size[id(k)] for k in kids))
            continue
        if key in size:
            continue
        if key in open_:
            raise InputError(path, node.start_mark.line + 1, None, "an alias refers to a node that contains "
                             "it (a document that expands forever)")
        open_.add(key)
        nodes[key] = node
        stack.append((node, True))
        for kid in _children(node):
            refs[id(kid)] = refs.get(id(kid), 0) + 1
            if id(kid) in open_:
                raise InputError(path, kid.start_mark.line + 1, None, "an alias refers to a node that "
                                 "contains it (a document that expands forever)")
            if id(kid) not in size:
                stack.append((kid, False))
    total = size[id(root)]
    if total > limit:
        worst = max((k for k in refs if refs[k] > 1), key=lambda k: size[k] * (refs[k] - 1), default=id(root))
        line = nodes[worst].start_mark.line + 1
        raise InputError(path, line, None, f"aliases expand this document to {total:,} characters, over the "
                         f"{limit:,} allowed for a {text_len:,}-character file (the node on this line is "
                         f"repeated {refs.get(worst, 1)} times)")


def _describe_marked(exc: yaml.MarkedYAMLError, text: str) -> tuple[int | None, None, str]:
    """(line, field, message) for a scanner/parser error, naming where the open construct began."""
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    problem = exc.problem or exc.context or "syntax error"
    if "maximum nesting depth" in problem:  # libyaml >= 0.2.6's scanner refuses before our depth check runs
        return line, None, f"nested more than {MAX_DEPTH} levels deep"
    ctx_mark = exc.context_mark
    if exc.context and exc.problem:
        where = f" on line {ctx_mark.line + 1}" if ctx_mark is not None and ctx_mark.line + 1 != line else ""
        problem += f" ({exc.context}{where})"
    if line is not None and "\t" in text.split("\n")[line - 1][: (mark.column if mark else 0) + 1]:
        problem += "; tabs cannot indent YAML, use spaces"
    return line, None, f"invalid YAML: {problem}"


def _key_value(node: yaml.Node, constructor: SafeConstructor) -> object:
    """The Python value of a scalar mapping key (`1:` is an int key, `a:` a str)."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        return constructor.construct_object(node)
    except yaml.YAMLError:
        return node.value


def _walk(
    node: yaml.Node,
    path: tuple[PathPart, ...],
    lines: LineMap,
    src: str | None,
    seen: set[int],
    constructor: SafeConstructor,
) -> None:
    lines.set(path, node.start_mark.line + 1)
    if id(node) in seen:  # an alias to a node already mapped (or a recursive one)
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines, src, seen, constructor)
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[Hashable, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` keys may be overridden by explicit ones, as YAML intends
            key = _key_value(key_node, constructor)
            line = key_node.start_mark.line + 1
            if isinstance(key, Hashable) and key is not None:
                if key in first_line:
                    raise InputError(
                        src,
                        line,
                        format_field((*path, str(key))),
                        f"duplicate key {str(key)!r} (first set on line {first_line[key]})",
                    )
                first_line[key] = line
                lines.set((*path, key), line)
                _walk(value_node, (*path, key), lines, src, seen, constructor)


def refuse_nul(data: object, lines: LineMap, src: str | None) -> None:
    """A NUL byte ("\\0" in a quoted YAML string) in any value of a plan: no path, environment variable or
    argument can hold one (the OS would refuse it later, as a traceback)."""
    stack: list[tuple[tuple[PathPart, ...], object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise InputError(src, lines.line_of(path), format_field(path),
                                 "contains a NUL byte (\\0): no path, environment value or argument can "
                                 "hold one")
        elif isinstance(value, dict):
            for k, v in value.items():
                stack.append(((*path, k), k) if isinstance(k, str) and "\x00" in k else ((*path, k), v))
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in enumerate(value))


# ---------------------------------------------------------------- pydantic errors -> InputError


def validate(
    model_cls: type[M],
    data: object,
    path: str | Path | None,
    linemap: LineMap,
    *,
    context: dict[str, Any] | None = None,
) -> M:
    """Validate `data` with `model_cls`; on failure raise the first problem (in file order)."""
    src = str(path) if path is not None else None
    if data is None:
        raise InputError(src, None, None, "file is empty")
    try:
        return model_cls.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors()
    found = [(err["type"], _problem(model_cls, data, err, src, linemap)) for err in errors]
    misspelt = [p for kind, p in found if kind == "extra_forbidden"]
    found = [(kind, p) for kind, p in found if not (kind == "missing" and _explained(p, misspelt))]
    # File order, but a missing field (placed at its parent) after the rest. Ties keep pydantic's order.
    found.sort(key=lambda pair: (pair[0] == "missing", pair[1].line or 0))
    problems = [p for _, p in found]
    first = problems[0]
    if len(problems) > 1:
        more = len(problems) - 1
        first = InputError(
            first.path,
            first.line,
            first.field,
            f"{first.message} (and {more} more problem{'s' if more > 1 else ''})",
        )
    raise first


def _explained(missing: InputError, misspelt: list[InputError]) -> bool:
    """True when a misspelt sibling key was meant to be this missing field ('did you mean' it)."""
    parent, _, name = (missing.field or "").rpartition(".")
    return any(
        (m.field or "").rpartition(".")[0] == parent and f"(did you mean {name!r}?)" in m.message
        for m in misspelt
    )


def _problem(
    model_cls: type[BaseModel], data: object, err: ErrorDetails, src: str | None, linemap: LineMap
) -> InputError:
    loc = _data_loc(data, tuple(err["loc"]), model_cls)
    ctx = err.get("ctx") or {}
    extra = ctx.get("error")
    if isinstance(extra, FieldProblem):
        loc = _data_loc(data, (*loc, *extra.loc), model_cls)
    message = field_message(model_cls, loc, err)
    return InputError(src, linemap.line_of(loc), format_field(loc), message)


def _data_loc(data: object, loc: tuple[PathPart, ...], model_cls: object = None) -> tuple[PathPart, ...]:
    """Keep the parts of a pydantic location that exist in the data (drops union tags and the like). A field
    the data gave under its old key (a model's `moved_keys`: old key -> the path where it lives now) is placed
    at that key, as written."""
    out: list[PathPart] = []
    cur, tp = data, model_cls
    i = 0
    while i < len(loc):
        moved = _moved_from(tp, cur, loc[i:])
        if moved is not None:
            old, width = moved
            out.append(old)
            cur, tp, i = cur[old] if isinstance(cur, dict) else None, None, i + width
            continue
        part = loc[i]
        tp = child_type(tp, part)
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
        elif isinstance(cur, dict) and i == len(loc) - 1 and isinstance(part, str) and part.isidentifier():
            pass  # a missing field: it names the place even though the data lacks it
        else:
            break
        out.append(part)
        i += 1
    return tuple(out)


def _moved_from(tp: object, cur: object, rest: tuple[PathPart, ...]) -> tuple[str, int] | None:
    """(old key, length of the new path) when `rest` starts at a field `cur` gave under its old key."""
    model = model_at(tp, ()) if tp is not None else None
    moved = getattr(model, "moved_keys", None) or {}
    if not isinstance(cur, dict):
        return None
    for old, new in moved.items():
        if old in cur and tuple(rest[: len(new)]) == tuple(new):
            return old, len(new)
    return None


# ---------------------------------------------------------------- shared model plumbing


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors and YAML types are taken as written."""

    model_config = ConfigDict(extra="forbid", strict=True)


def scalar_to_str(value: object) -> object:
    """Let argv items and env values be written as bare numbers (`- 4096`, `CUDA_VISIBLE_DEVICES: 0`)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


ArgStr = Annotated[str, BeforeValidator(scalar_to_str)]
