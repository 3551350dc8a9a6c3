"""Weak spots -> a regeneration input: SpecForge conversation JSONL (the user turns; `regen` has the target
answer them), deduplicated, with a manifest of where each row came from and the prompts held out for the
evaluation.

The mix (docs/retrain.md):
  weak     the prompts of the weak spots (a category's prompts, a prompt, or a conversation up to its weak
           turn); `holdout` of them (default half, at least one per spot that has two) are held out;
  rest     `rest_share` (default 25 %) of the run's other prompts, so the drafter keeps what it does well;
  traffic  rows of real traffic logs (OpenAI request JSONL, ShareGPT, SpecForge, question.jsonl, plain
           prompts: harness.inputs.importers), optionally a seeded sample of them.
Every choice is a stable hash of (seed, suite/prompt), so the same command picks the same rows. A row whose
user turns repeat an earlier row's (after lower-casing and collapsing white space) is dropped as a
duplicate; a row equal to a held-out prompt is dropped too, so the evaluation never sees its training data.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.common.errors import InputError
from harness.inputs.suites import Prompt, Suite
from harness.retrain.weak_spots import Level, Spot

MANIFEST = "manifest.json"
REGEN_INPUT = "regen_input.jsonl"
Source = Literal["weak", "rest", "traffic"]


class ManifestRow(BaseModel):
    id: str
    source: Source
    category: str
    suite: str | None = None
    prompt_id: str | None = None
    turn: int | None = None  # turn level: the conversation up to this user turn
    accept_len: float | None = None  # the spot's, in the source run
    reason: str = ""
    file: str | None = None  # traffic: the log it came from


class HeldOut(BaseModel):
    suite: str
    prompt_id: str
    category: str
    source: Source


class Manifest(BaseModel):
    """manifest.json: what the regeneration input holds and why, and what the evaluation replays."""

    run: str
    variant: str
    level: str
    position: int | None = None
    weak: list[dict[str, Any]] = Field(default_factory=list)  # the chosen spots (Spot fields)
    rest_share: float
    holdout: float
    seed: int
    traffic: list[str] = Field(default_factory=list)
    rows: list[ManifestRow] = Field(default_factory=list)
    held_out: list[HeldOut] = Field(default_factory=list)
    dropped: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    def held_out_ids(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for h in self.held_out:
            out.setdefault(h.suite, set()).add(h.prompt_id)
        return out


def read_manifest(path: str | Path) -> Manifest:
    p = Path(path)
    try:
        return Manifest.model_validate_json(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(str(p), None, None, f"unreadable manifest: {exc}") from None


def run_suites(run_dir: str | Path) -> list[Suite]:
    """The suites a run replayed, as its plan.resolved.json holds them."""
    path = Path(run_dir) / "plan.resolved.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [Suite.model_validate(s) for s in data["suites"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(str(path), None, "suites", f"cannot read the run's suites: {exc}") from None


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def conversation(p: Prompt, upto_turn: int | None = None) -> list[dict[str, str]]:
    """The prompt's turns as SpecForge messages (written assistant turns kept: regen replaces them), cut after
    user turn `upto_turn` when given."""
    msgs = p.chat_messages() + [{"role": "user", "content": f} for f in p.followups]
    if upto_turn is None:
        return msgs
    out, users = [], 0
    for m in msgs:
        out.append(m)
        users += m["role"] == "user"
        if users >= upto_turn:
            break
    return out


def content_key(messages: list[dict[str, Any]]) -> str:
    text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    return hashlib.sha256(re.sub(r"\s+", " ", text.strip().lower()).encode()).hexdigest()


def _split(keys: list[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held out): a stable-hash order; at least one of each when there are two or more, a single
    prompt is held out (the evaluation must see the spot)."""
    order = sorted(keys, key=lambda k: _rank(seed, k))
    if len(order) < 2:
        return [], order
    n_hold = min(len(order) - 1, max(1, round(len(order) * holdout)))
    return order[n_hold:], order[:n_hold]


def build_input(run_dir: str | Path, variant: str, chosen: list[Spot], level: Level, out_dir: str | Path, *,
                rest_share: float = 0.25, holdout: float = 0.5, seed: int = 1, position: int | None = None,
                traffic: list[str] | None = None, traffic_sample: int | None = None,
                traffic_format: str = "auto") -> Manifest:
    """Write out_dir/regen_input.jsonl and out_dir/manifest.json; returns the manifest."""
    if not 0.0 <= rest_share <= 1.0:
        raise InputError(None, None, "rest_share", f"a share from 0 to 1, got {rest_share}")
    if not 0.0 < holdout < 1.0:
        raise InputError(None, None, "holdout", f"a share between 0 and 1, got {holdout}")
    suites = run_suites(run_dir)
    prompts = {f"{s.name}/{p.id}": (s.name, p) for s in suites for p in s.prompts}
    by_spot: dict[str, list[str]] = {}  # spot key -> its prompts
    turns: dict[str, int] = {}
    for spot in chosen:
        if level == "category":
            keys = [k for k, (_, p) in prompts.items() if p.category == spot.category]
        else:
            keys = [k for k in (f"{spot.suite}/{spot.prompt_id}",) if k in prompts]
            if level == "turn" and keys:
                turns[keys[0]] = max(turns.get(keys[0], 0), int(spot.turn or 1))
        by_spot[spot.key] = keys
    manifest = Manifest(run=str(run_dir), variant=variant, level=level, position=position,
                        weak=[json.loads(json.dumps(asdict(s))) for s in chosen],
                        rest_share=rest_share, holdout=holdout, seed=seed, traffic=list(traffic or []))
    accept = {s.key: s.accept_len for s in chosen}
    train: list[tuple[str, Source, str]] = []  # (prompt key, source, spot key)
    weak_keys: set[str] = set()
    if level == "category":
        for spot_key, keys in by_spot.items():
            t, h = _split(keys, holdout, seed)
            train += [(k, "weak", spot_key) for k in t]
            manifest.held_out += [_held(prompts[k], "weak") for k in h]
            weak_keys.update(keys)
            if not t:
                manifest.notes.append(f"{spot_key}: one prompt, held out for the evaluation; no training row "
                                      "from the run (add a traffic log)")
    else:
        keys = sorted({k for ks in by_spot.values() for k in ks})
        t, h = _split(keys, holdout, seed)
        spot_of = {k: sk for sk, ks in by_spot.items() for k in ks}
        train += [(k, "weak", spot_of[k]) for k in t]
        manifest.held_out += [_held(prompts[k], "weak") for k in h]
        weak_keys.update(keys)
        if not t:
            manifest.notes.append("every weak prompt is held out for the evaluation; no training row from "
                                  "the run (choose more spots, or add a traffic log)")
    rest = [k for k in prompts if k not in weak_keys]
    n_rest = round(len(rest) * rest_share)
    rest_order = sorted(rest, key=lambda k: _rank(seed, "rest:" + k))
    train += [(k, "rest", "") for k in rest_order[:n_rest]]
    manifest.held_out += [_held(prompts[k], "rest") for k in rest_order[n_rest:]]
    held_keys = {content_key(conversation(prompts[f"{h.suite}/{h.prompt_id}"][1])) for h in manifest.held_out}
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(row_id: str, messages: list[dict[str, str]], entry: ManifestRow) -> None:
        key = content_key(messages)
        if key in held_keys:
            manifest.dropped["same user turns as a held-out prompt"] = \
                manifest.dropped.get("same user turns as a held-out prompt", 0) + 1
        elif key in seen:
            manifest.dropped["duplicate user turns"] = manifest.dropped.get("duplicate user turns", 0) + 1
        else:
            seen.add(key)
            rows.append({"id": row_id, "conversations": messages})
            manifest.rows.append(entry)

    for k, source, spot_key in train:
        suite, p = prompts[k]
        turn = turns.get(k) if level == "turn" else None
        row_id = k + (f"#{turn}" if turn else "")
        why = f"weak spot {spot_key} (accept len {accept.get(spot_key) or 0:.2f})" if source == "weak" \
            else f"rest share {rest_share:g}"
        add(row_id, conversation(p, turn),
            ManifestRow(id=row_id, source=source, category=p.category, suite=suite,
                                                      prompt_id=p.id, turn=turn,
                                                      accept_len=accept.get(spot_key), reason=why))
    for path in traffic or []:
        for row_id, category, messages in traffic_rows(path, traffic_format, traffic_sample, seed):
            add(row_id, messages, ManifestRow(id=row_id, source="traffic", category=category, file=str(path),
                                              reason="traffic log"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / REGEN_INPUT).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                   encoding="utf-8")
    (out / MANIFEST).write_text(manifest.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return manifest


def _held(entry: tuple[str, Prompt], source: Source) -> HeldOut:
    suite, p = entry
    return HeldOut(suite=suite, prompt_id=p.id, category=p.category, source=source)


def traffic_rows(path: str | Path, fmt: str = "auto", sample: int | None = None, seed: int = 1
                 ) -> list[tuple[str, str, list[dict[str, str]]]]:
    """(row id, category, messages) of a traffic log, every user turn of a conversation kept."""
    from harness.inputs.importers import import_suite

    suite, _report = import_suite(path, fmt=fmt, turns="live", sample=sample, seed=seed)
    stem = Path(path).stem
    return [(f"traffic:{stem}:{p.id}", p.category, conversation(p)) for p in suite.prompts]


def held_out_suites(run_dir: str | Path, manifest: Manifest) -> list[Suite]:
    """The run's suites cut to the held-out prompts (suites left with none are dropped)."""
    keep = manifest.held_out_ids()
    out = []
    for s in run_suites(run_dir):
        prompts = [p for p in s.prompts if p.id in keep.get(s.name, set())]
        if prompts:
            out.append(s.model_copy(update={"prompts": prompts}))
    return out
