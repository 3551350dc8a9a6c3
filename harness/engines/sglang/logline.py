"""One SGLang scheduler ``Decode batch`` / ``Prefill batch`` log line -> ``LogWindow`` (0.4.3 to 0.5.23).

Every format family (REFERENCE.md §1.3/§1.5) has the same shape::

    [PREFIX][<timestamp>[.mmm][ <ranks>]] <Decode|Prefill> batch[ [N]]<.|,> key: value, key: value[, ]

so the parser locates the ``] Decode batch`` / ``] Prefill batch`` marker, validates the bracketed
timestamp before it and splits the rest into key/value pairs. Field order, optional fields and the
trailing comma then do not matter. Anything before the bracket (Ray's ``(SGLangEngine pid=N)``,
colour codes, a tqdm bar the log line was glued to) is ignored.

A line is rejected (``None``) unless every comma-separated part is ``key: value``, it has
``#running-req`` and ``#queue-req`` (present in every family) and every recognised key carries a
value of the expected type; that drops lines truncated before their end and corrupted ones. A line
cut inside its last number cannot be detected.
Unrecognised keys (``largest-len``, ``#pending-token``, ``swa token usage``, ``fwd occupancy`` ...)
are kept verbatim in ``LogWindow.extra``.

Files, streams and line numbering are in ``harness.engines.sglang.logparse``, the public entry point.
"""

from __future__ import annotations

import re
from operator import itemgetter
from typing import Literal

from harness.common.logwindow import LogWindow  # noqa: F401  (the engines share one window type)


class _WindowBuilder:
    # Same slots as LogWindow but mutable: the frozen __init__ costs one object.__setattr__ per
    # field (~3 µs per window here), this plus a __class__ swap ~0.5 µs. Equality with the normal
    # constructor is tested.
    __slots__ = LogWindow.__slots__

    def __init__(self, line, time, kind, running_req, queue_req, token_usage, accept_len, accept_rate,
                 cuda_graph, gen_throughput, input_throughput, num_tokens, new_seq, new_token,
                 cached_token, ranks, iteration, extra):  # fmt: skip
        self.line = line
        self.time = time
        self.kind = kind
        self.running_req = running_req
        self.queue_req = queue_req
        self.token_usage = token_usage
        self.accept_len = accept_len
        self.accept_rate = accept_rate
        self.cuda_graph = cuda_graph
        self.gen_throughput = gen_throughput
        self.input_throughput = input_throughput
        self.num_tokens = num_tokens
        self.new_seq = new_seq
        self.new_token = new_token
        self.cached_token = cached_token
        self.ranks = ranks
        self.iteration = iteration
        self.extra = extra
        self.__class__ = LogWindow  # type: ignore[assignment]


_new_window = _WindowBuilder  # calling it returns a LogWindow

# "2026-11-29 10:12:34[.123][ DP0 TP0 EP0]" (rank names: DP, TP, EP, PP, ATTN_CP, MOE_DP).
_HEAD_RE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: [A-Z][A-Z_]*\d+)*)", re.ASCII)
_head_cache: dict[str, tuple[str, str]] = {}  # bracket text -> (time, ranks); stamps repeat a lot
_HEAD_CACHE_MAX = 64


def _read_head(inner: str) -> tuple[str, str] | None:
    """(time, ranks) from the text between the brackets, or None if it is not a log timestamp."""
    head = _head_cache.get(inner)
    if head is not None:
        return head
    m = _HEAD_RE.fullmatch(inner)
    if m is None:
        return None
    if len(_head_cache) >= _HEAD_CACHE_MAX:
        _head_cache.clear()
    head = _head_cache[inner] = (m[1], m[2][1:])
    return head


# Fields read from a line's key/value list, in the order _build unpacks them; alternatives in turn.
_GRAPH = " graph"  # stands for any "<device> graph" key: cuda, cpu, npu, musa
_FIELD_KEYS = (
    ("#running-req",),
    ("#queue-req",),
    ("token usage", "full token usage"),
    ("#token", "#full token"),
    ("accept len",),
    ("accept rate",),
    ("cuda graph", _GRAPH),
    ("gen throughput (token/s)",),
    ("input throughput (token/s)",),
    ("#new-seq",),
    ("#new-token",),
    ("#cached-token",),
)
FIELD_NAMES = ("running_req", "queue_req", "token_usage", "num_tokens", "accept_len", "accept_rate",
               "cuda_graph", "gen_throughput", "input_throughput", "new_seq", "new_token", "cached_token")
_Plan = tuple[itemgetter, tuple[str, ...], tuple[int, ...]]
# A log repeats a handful of key sequences, so where each field sits is worked out once per
# sequence; False marks sequences without #running-req/#queue-req.
_plan_cache: dict[tuple[str, ...], _Plan | Literal[False]] = {}
_PLAN_CACHE_MAX = 512


def field_positions(keys: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Index in ``keys`` of each ``FIELD_NAMES`` field (-1 if absent) and of the unrecognised keys;
    ``None`` without ``#running-req`` / ``#queue-req``. A repeated key counts once, at its first place."""
    where: dict[str, int] = {}
    for i, key in enumerate(keys):
        where.setdefault(key, i)
    used: set[str] = set()
    picks = []
    for alternatives in _FIELD_KEYS:
        pos = -1
        for alt in alternatives:
            key = next((k for k in where if k.endswith(_GRAPH)), "") if alt == _GRAPH else alt
            if key in where:
                pos = where[key]
                used.add(key)
                break
        picks.append(pos)
    if picks[0] < 0 or picks[1] < 0:
        return None
    return tuple(picks), tuple(i for i, key in enumerate(keys) if key not in used)


def _make_plan(keys: tuple[str, ...], first: int, step: int) -> _Plan | Literal[False]:
    """Where each field's value sits in a list holding value i at ``first + step * i`` and a final
    None (index -1, for absent fields); plus the unrecognised keys and their value indexes."""
    positions = field_positions(keys)
    if positions is None:
        return False
    picks, extra = positions
    get = itemgetter(*(-1 if i < 0 else first + step * i for i in picks))
    return get, tuple(keys[i] for i in extra), tuple(first + step * i for i in extra)


# Fast path: a log repeats one decode and one prefill layout, so after the general parser accepts a
# line, a regex for exactly its layout is tried first on the next lines (one C call instead of
# find/split/lookup; about a third of the time per line). A line it fails on takes the general
# path, so results are the same either way (tested). Values exclude commas and whitespace.
_Fast = tuple[re.Pattern[str], _Plan]
_fast: dict[str, tuple[_Fast, ...]] = {"decode": (), "prefill": ()}  # per kind, most recent first
_fast_cache: dict[tuple[str, tuple[str, ...]], _Fast] = {}
_FAST_PER_KIND = 2


def _remember_layout(kind: str, keys: tuple[str, ...]) -> None:
    recent = _fast[kind]
    fast = _fast_cache.get((kind, keys))
    if fast is not None and recent and recent[0] is fast:
        return
    if fast is None:
        if len(_fast_cache) >= _PLAN_CACHE_MAX:
            _fast_cache.clear()
        # The last value is not empty: "key: " is no pair once the general parser rstrip()s it.
        body = ", ".join(re.escape(key) + r": ([^,\s]*)" for key in keys) + "(?<!: )"
        word = "Decode" if kind == "decode" else "Prefill"
        # \s is Unicode here, matching what str.rstrip() strips on the general path.
        rx = re.compile(r"\[([^\[\]]*)\] " + word + r" batch(?: \[([0-9]+)\])?[.,] " + body + r",?\s*")
        plan = _make_plan(keys, 2, 1)  # groups: bracket text, iteration, values...
        if plan is False:  # cannot happen: the keys just produced a window
            return
        fast = _fast_cache[(kind, keys)] = (rx, plan)
    _fast[kind] = (fast, *(f for f in recent if f is not fast))[:_FAST_PER_KIND]


def parse_segment(seg: str, line_no: int) -> LogWindow | None:
    """Parse one ``\\r``/``\\n``-free piece of a line; ``None`` if it is no stats line."""
    if seg[:1] == "[":
        kind = "decode" if "] Decode batch" in seg else "prefill"
        for rx, plan in _fast[kind]:
            m = rx.fullmatch(seg)
            if m is not None:
                values = (*m.groups(), None)
                head = _read_head(values[0])
                if head is None:
                    return None
                iteration = None if values[1] is None else int(values[1])
                return _build(line_no, head, kind, iteration, values, plan)
    return _parse_slow(seg, line_no)


def split_line(seg: str) -> tuple[str, tuple[str, str], int | None, list[str]] | None:
    """Kind, (time, ranks), iteration and the alternating key/value list of a stats line, or None.
    The values are not checked (see ``field_positions`` for which key is which field)."""
    k = seg.find("] Decode batch")
    if k >= 0:
        kind = "decode"
        p = k + 14
    else:
        k = seg.find("] Prefill batch")
        if k < 0:
            return None
        kind = "prefill"
        p = k + 15
    b = seg.rfind("[", 0, k)
    if b < 0:
        return None
    head = _read_head(seg[b + 1 : k])
    if head is None:
        return None
    iteration = None
    sep = seg[p : p + 2]
    if sep != ", " and sep != ". ":
        if sep != " [":
            return None
        q = seg.find("]", p + 2)
        digits = seg[p + 2 : q]
        if q < 0 or not (digits.isascii() and digits.isdigit()):
            return None
        iteration = int(digits)
        p = q + 1
        sep = seg[p : p + 2]
        if sep != ", " and sep != ". ":
            return None
    body = seg[p + 2 :].rstrip()
    if body[-1:] == ",":  # 0.4.3-0.4.5, 0.4.9.post6-0.5.8 end with ", "
        body = body[:-1]
    kv = body.replace(", ", ": ").split(": ")
    if len(kv) & 1:  # a part without ": ": SGLang never prints one, so the line was cut or mangled
        return None
    return kind, head, iteration, kv


def _parse_slow(seg: str, line_no: int) -> LogWindow | None:
    """The general parser: any prefix, any layout."""
    parts = split_line(seg)
    if parts is None:
        return None
    kind, head, iteration, kv = parts
    keys = tuple(kv[::2])
    plan = _plan_cache.get(keys)
    if plan is None:
        if len(_plan_cache) >= _PLAN_CACHE_MAX:
            _plan_cache.clear()
        plan = _plan_cache[keys] = _make_plan(keys, 1, 2)
    if plan is False:
        return None
    window = _build(line_no, head, kind, iteration, (*kv, None), plan)
    if window is not None:
        _remember_layout(kind, keys)
    return window


def _build(line_no: int, head: tuple[str, str], kind: str, iteration: int | None,
           values: tuple[str | None, ...], plan: _Plan) -> LogWindow | None:  # fmt: skip
    """Convert the values a plan picks out; ``None`` if one has the wrong type."""
    get, extra_keys, extra_at = plan
    running, queue, usage, ntok, alen, arate, graph, gen, inp, nseq, ntoken, cached = get(values)
    try:
        running = int(running)
        queue = int(queue)
        if usage is not None:
            usage = float(usage)
        if ntok is not None:
            ntok = int(ntok)
        if alen is not None:
            alen = float(alen)
        if arate is not None:
            arate = float(arate)
        if graph is not None:
            if graph != "True" and graph != "False":
                return None
            graph = graph == "True"
        if gen is not None:
            gen = float(gen)
        if inp is not None:
            inp = float(inp)
        if nseq is not None:
            nseq = int(nseq)
        if ntoken is not None:
            ntoken = int(ntoken)
        if cached is not None:
            cached = int(cached)
    except ValueError:
        return None
    extra = tuple(zip(extra_keys, [values[i] for i in extra_at], strict=True)) if extra_keys else ()
    return _new_window(line_no, head[0], kind, running, queue, usage, alen, arate, graph, gen, inp,
                       ntok, nseq, ntoken, cached, head[1], iteration, extra)  # fmt: skip


def parse_line(text: str, line_no: int = 0) -> LogWindow | None:
    """Parse one log line (trailing newline allowed). ``None`` if it is not a stats line; never raises.

    If ``\\r`` splits the line into several segments, the first segment that parses wins.
    """
    try:
        for seg in text.split("\r") if "\r" in text else (text,):
            window = parse_segment(seg.rstrip("\n"), line_no)
            if window is not None:
                return window
    except Exception:  # a parser bug must not take down a live tail; the line is just skipped
        return None
    return None
