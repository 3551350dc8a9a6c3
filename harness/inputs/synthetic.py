"""Synthetic long-context prompts for the context-length axis, done right (`draftbench import-suite
--synthetic --tokens 4096,16384 --tokenizer PATH`):

  - lengths in the target's own tokens: PATH is its tokenizer.json (or the model directory holding it), read
    with the `tokenizers` package (an optional dependency: `pip install 'draftbench[synthetic]'`); each
    prompt's user turn is exactly N tokens by that tokenizer (the chat template adds its own few);
  - text, not random token ids: a document (passages of --source, a text file of real prose, else generated
    sentences) followed by a task about it (summarise, list the facts, write an abstract), sent as a chat;
  - labelled: the suite says `synthetic: true` and its description starts with SYNTHETIC, every category is
    `synthetic-<N>` and every id `synthetic-<N>-<k>`, so it is named as such in every table, and `check` and
    `run` warn about it (harness.checks.realism): use it for where acceptance decays with context, not for
    the accept length or speedup real traffic gets.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

from harness.common.errors import InputError
from harness.inputs.suites import Suite
from harness.inputs.yamlio import LineMap, validate

if TYPE_CHECKING:  # an optional package (draftbench[synthetic]), imported where it is used
    from tokenizers import Tokenizer

TASKS = (
    "Summarize the document above in five bullet points.",
    "List the three most important facts the document above states, each with one sentence of explanation.",
    "Write a short title and a one-paragraph abstract for the document above.",
    "What questions does the document above leave open? Answer in a numbered list.",
)
_NOUNS = ("system report model team city river market engine study method result season library garden "
          "council network process record project signal storm harbour contract budget archive chapter "
          "window station harvest orchard bridge province factory treaty").split()
_VERBS = ("describes changes follows supports reaches measures records explains improves shows requires "
          "covers connects limits opens reviews").split()
_ADJS = ("early large quiet northern careful recent public modest steady narrow formal local useful "
         "detailed annual").split()
_LINKS = ("and", "but", "while", "because", "so", "although")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A `tokenizers.Tokenizer` from tokenizer.json (or a directory holding one); a clear error when the
    package is missing or the file is not there."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError(None, None, "--tokenizer", "needs the `tokenizers` package to count the target's "
                         "tokens: pip install 'draftbench[synthetic]' (or: pip install tokenizers)") from None
    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise InputError(str(file), None, "--tokenizer", "no tokenizer.json there: give the target model's "
                         "directory, or its tokenizer.json")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 - the library raises its own exception types for a bad file
        raise InputError(str(file), None, "--tokenizer", "not a tokenizer.json the tokenizers package reads: "
                         f"{exc}") from None


def _sentence(rng: random.Random) -> str:
    a, b = rng.choice(_ADJS), rng.choice(_ADJS)
    s = (f"The {a} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} the {b} {rng.choice(_NOUNS)} of the "
         f"{rng.choice(_NOUNS)}")
    if rng.random() < 0.5:
        s += f", {rng.choice(_LINKS)} a {rng.choice(_ADJS)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} it"
    if rng.random() < 0.3:
        s += f" in {rng.randint(1900, 2030)}"
    return s + "."


def _filler(rng: random.Random, chars: int, source: str | None) -> str:
    """At least `chars` characters of document: consecutive passages of `source` from a seeded offset
    (wrapping round), else generated paragraphs of plain sentences."""
    if source:
        start = rng.randrange(len(source))
        text = source[start:] + "\n\n" + source
        while len(text) < chars:
            text += "\n\n" + source
        return text[: chars + 200]
    paras, size = [], 0
    while size < chars:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(3, 7)))
        paras.append(para)
        size += len(para) + 2
    return "\n\n".join(paras)


def fit_tokens(tok: Tokenizer, n: int, rng: random.Random, task: str, source: str | None) -> str:
    """A document and `task` whose text is exactly `n` tokens by `tok` (within a token where a boundary merge
    leaves no exact cut)."""
    tail = "\n\n" + task
    room = n - len(tok.encode(tail, add_special_tokens=False).ids)
    if room < 8:
        raise InputError(None, None, "--tokens", f"{n} tokens leave no room for a document before the task "
                         f"({n - room} tokens); ask for more")
    chars = 4 * n
    doc = ""
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    while len(ids) < room:
        doc = _filler(rng, chars, source)
        enc = tok.encode(doc, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
        chars *= 2
    best = text = ""
    # cut the document where a token ends (its offsets; decoding would give another text for tokenizers that
    # normalise or do not decode), then the cut's text may re-encode a token longer or shorter: try a few
    for cut in range(room, max(0, room - 16), -1):
        text = doc[: offsets[cut - 1][1]].rstrip() + tail
        got = len(tok.encode(text, add_special_tokens=False).ids)
        if got == n:
            return text
        if got < n and not best:
            best = text
    return best or text


def synthetic_suite(tokens: list[int], tokenizer: str | Path, *, count: int = 4, name: str = "synthetic",
                    source: str | Path | None = None, seed: int = 1) -> Suite:
    """`count` prompts of each length in `tokens` (module doc)."""
    if not tokens or any(n <= 0 for n in tokens):
        raise InputError(None, None, "--tokens", f"give positive token counts, e.g. 4096,16384; got {tokens}")
    if count <= 0:
        raise InputError(None, None, "--count", f"must be at least 1, got {count}")
    tok = load_tokenizer(tokenizer)
    text = None
    if source is not None:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(str(source), None, "--source", f"cannot read it as UTF-8 text: {exc}") from None
        if not text.strip():
            raise InputError(str(source), None, "--source", "is empty")
    rng = random.Random(seed)
    prompts = []
    for n in tokens:
        for k in range(1, count + 1):
            task = TASKS[(k - 1) % len(TASKS)]
            prompts.append({"id": f"synthetic-{n}-{k}", "category": f"synthetic-{n}",
                            "messages": [{"role": "user", "content": fit_tokens(tok, n, rng, task, text)}]})
    made_from = f"passages of {Path(source).name}" if source is not None else "generated sentences"
    tok_file = Path(tokenizer) / "tokenizer.json" if Path(tokenizer).is_dir() else Path(tokenizer)
    data = {"name": name, "synthetic": True,
            "description": f"SYNTHETIC: {count} prompts each of {', '.join(map(str, tokens))} tokens "
                           f"({made_from}, counted with {tok_file.parent.name}/{tok_file.name}) for the "
                           "context-length axis; not real traffic",
            "prompts": prompts}
    return validate(Suite, data, "synthetic", LineMap())
