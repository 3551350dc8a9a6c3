"""The baseline's answers scored token by token: what the lossless audit asks the baseline server for, and
how a divergence's margin is read from it (pure; the requests: harness.bench.audit).

A scored path is one answer of the baseline server with logprobs: the text, and per token its text, its
logprob and the top alternatives. It may start after a prefix (an anchored continuation: the server went on
from the baseline's own text up to there), whose characters it does not score. Token texts are mapped onto
the answer's characters by walking them (`offsets`); a token decoded alone as U+FFFD (a piece of a
multi-byte character) takes the character it starts, its later pieces none; a token whose text is not in
the answer at all (a special token, a reasoning tag the parser removed) takes none.

At the first character where a speculative answer S leaves the baseline's answer B, the margin is
logprob(B's token) - logprob(S's token) at that position, read from a path whose text equals B's up to the
position's token (the same context): a path scores a position only where its own context is B's.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class Tok:
    text: str
    logprob: float
    alts: tuple[tuple[str, float], ...]  # the top alternatives as the server listed them (may hold `text`)

    def entries(self) -> list[tuple[str, float]]:
        """The token and its alternatives, each text once (the token's own logprob first)."""
        seen: dict[str, float] = {self.text: self.logprob}
        for text, lp in self.alts:
            seen.setdefault(text, lp)
        return list(seen.items())


def offsets(tokens: list[str], text: str, start: int = 0) -> list[int]:
    """The character of `text` where each token starts, the first at `start`."""
    out: list[int] = []
    cur, open_char = start, False
    for s in tokens:
        out.append(cur)
        if s and text.startswith(s, cur):
            cur, open_char = cur + len(s), False
        elif REPLACEMENT in s:
            core = s.lstrip(REPLACEMENT)
            if not open_char and len(core) < len(s):  # the first piece of a character: it takes the character
                cur, open_char = cur + 1, True
            if core and text.startswith(core, cur):
                cur, open_char = cur + len(core), False
    return out


@dataclass
class ScoredPath:
    text: str
    prefix: int  # characters given as the prefix (an anchored continuation); 0 for a free answer
    toks: list[Tok]
    start_token: int = 0  # answer tokens before the first scored one
    offs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.offs:
            self.offs = offsets([t.text for t in self.toks], self.text, self.prefix)

    def token_at(self, char: int) -> int | None:
        """The token holding character `char` (the last token for a character past the scored text)."""
        if not self.toks or char < self.prefix:
            return None
        return max(0, bisect_right(self.offs, char) - 1)

    def on(self, ref: str, upto: int) -> bool:
        """Whether this path's context equals `ref` up to character `upto`."""
        return len(self.text) >= upto and self.text[:upto] == ref[:upto]


def best_match(entries: list[tuple[str, float]], ref: str, at: int) -> tuple[str, float] | None:
    """The longest entry text that `ref` holds at `at` (pieces of characters never match)."""
    hits = [(t, lp) for t, lp in entries if t and REPLACEMENT not in t and ref.startswith(t, at)]
    return max(hits, key=lambda e: len(e[0])) if hits else None


@dataclass(frozen=True)
class Margin:
    token: int  # answer position (tokens before it)
    base_token: str
    spec_token: str
    margin: float  # logprob(base token) - logprob(spec token); a lower bound where `bound`
    bound: bool  # the speculative token is not among the alternatives: at least this far below


def margin_at(paths: list[ScoredPath], base: str, spec: str, char: int) -> Margin | None:
    """The margin where `spec` first leaves `base` (at `char`), from the first path that scores that
    position in the baseline's own context; None when none does."""
    for p in sorted(paths, key=lambda q: q.prefix):
        k = p.token_at(char)
        if k is None or p.offs[k] < p.prefix or not p.on(base, p.offs[k]):
            continue
        at = p.offs[k]
        entries = p.toks[k].entries()
        b = best_match(entries, base, at)
        if b is None:
            continue
        s = best_match(entries, spec, at)
        if s is None:
            lowest = min(lp for _, lp in entries)
            return Margin(p.start_token + k, b[0], spec[at:at + 12], b[1] - lowest, True)
        return Margin(p.start_token + k, b[0], s[0], b[1] - s[1], False)
    return None


def coverage_end(p: ScoredPath, base: str) -> tuple[int, int] | None:
    """(chars of `base` this path scores up to, answer tokens before that point): to the end of `base` when
    it reproduces it, else through `base`'s token at the first character where it leaves `base`. None when
    the path is not on `base` at all."""
    if p.prefix > len(base) or not p.on(base, p.prefix):
        return None
    n = min(len(p.text), len(base))
    d = next((i for i in range(p.prefix, n) if p.text[i] != base[i]), None)
    if d is None:  # it reproduces `base`, or stops early inside it
        return n, p.start_token + len(p.toks)
    k = p.token_at(d)
    if k is None or p.offs[k] < p.prefix:
        return None
    b = best_match(p.toks[k].entries(), base, p.offs[k])
    return (p.offs[k] + len(b[0]), p.start_token + k + 1) if b else None


def next_anchor(paths: list[ScoredPath], base: str) -> tuple[int, int] | None:
    """Where the next anchored continuation must start to score `base` further: (chars, answer tokens) of
    the baseline's own text to give as the prefix; None when the paths score `base` whole, or cannot be
    extended (no path on it, or its token at a divergence is not among the alternatives)."""
    reach, tokens = 0, 0
    while True:
        ends = [e for p in paths if p.prefix <= reach and (e := coverage_end(p, base)) is not None]
        best = max(ends, default=None)
        if best is not None and best[0] >= len(base):
            return None
        if best is None or best[0] <= reach:
            return (reach, tokens) if reach > 0 else None
        reach, tokens = best


def parse_answer(data: dict[str, Any], chat: bool) -> tuple[str, list[Tok]] | None:
    """(answer text, tokens) of a non-streaming chat or completions answer; no tokens when it came without
    logprobs; None when it is no answer at all."""
    try:
        choice = data["choices"][0]
        lp = choice.get("logprobs")
        if chat:
            msg = choice.get("message") or {}
            text = (msg.get("reasoning_content") or "") + (msg.get("content") or "")
        else:
            text = str(choice.get("text") or "")
        if not isinstance(lp, dict):
            return text, []
        if chat:
            toks = [Tok(str(e["token"]), float(e["logprob"]),
                        tuple((str(a["token"]), float(a["logprob"])) for a in e.get("top_logprobs") or []))
                    for e in lp.get("content") or []]
        else:
            tops = lp.get("top_logprobs") or []
            toks = [Tok(str(t), float(v), tuple((str(a), float(b)) for a, b in (tops[i] or {}).items())
                        if i < len(tops) else ())
                    for i, (t, v) in enumerate(zip(lp.get("tokens") or [], lp.get("token_logprobs") or [],
                                                   strict=False)) if v is not None]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return text, toks
