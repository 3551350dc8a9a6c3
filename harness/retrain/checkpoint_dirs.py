"""The checkpoint directories a SpecForge training run writes on the target (REFERENCE §8.4): their layouts,
found by one listing (`discover_checkpoints`), a CLI-era one exported for SGLang (`export_checkpoint`), a
drafter path's epoch and step (`checkpoint_step`). harness.retrain.checkpoints turns them into drafters.

Layouts: `epoch_E_step_S/` (script era, directly servable: config.json + model.safetensors),
`epoch_E/` (v0.1.0), `{run_id}-stepN/` with `{run_id}-latest` / `{run_id}-best` links (CLI era; holds
`training_state.pt` only and needs `specforge export --to sglang` before SGLang can load it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.common.errors import HarnessError

if TYPE_CHECKING:
    from harness.targets.base import Target

_EPOCH_STEP = re.compile(r"^epoch_(?P<e>\d+)_step_(?P<s>\d+)$")
_EPOCH = re.compile(r"^epoch_(?P<e>\d+)$")
_RUN_STEP = re.compile(r"^(?P<run>.+)-step(?P<s>\d+)$")
_ALIAS = re.compile(r"^(?P<run>.+)-(?P<kind>latest|best)$")

# One line per entry of the output directory: type, what it holds, mtime, link target, name.
LIST_SH = r"""cd "$1" 2>/dev/null || { echo MISSING; exit 0; }
for f in * ; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -L "$f" ]; then t=l; l=$(readlink "$f"); elif [ -d "$f" ]; then t=d; l=; else continue; fi
  s=
  [ -f "$f/config.json" ] && s="${s}c"
  for w in "$f"/*.safetensors; do [ -e "$w" ] && s="${s}w"; break; done
  for w in "$f"/training_state*; do [ -e "$w" ] && s="${s}t"; break; done
  m=$(stat -c %Y "$f" 2>/dev/null || echo 0)
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$s" "$m" "$l" "$f"
done"""


@dataclass(frozen=True)
class Checkpoint:
    name: str  # directory name
    path: str  # on the target
    layout: str  # "epoch_step" | "epoch" | "run_step"
    epoch: int | None
    step: int | None
    servable: bool  # config.json + safetensors: usable as --speculative-draft-model-path as is
    has_training_state: bool
    mtime: float | None
    run_id: str | None = None
    aliases: tuple[str, ...] = ()  # "latest" / "best" when a run link points here

    @property
    def needs_export(self) -> bool:
        return not self.servable

    @property
    def label(self) -> str:
        """Short name for tables and drafter names: e1-s400, e2, s1200."""
        if self.layout == "epoch_step":
            return f"e{self.epoch}-s{self.step}"
        return f"e{self.epoch}" if self.layout == "epoch" else f"s{self.step}"


def parse_listing(output: str, output_dir: str) -> list[Checkpoint]:
    """LIST_SH's output -> checkpoints sorted by (epoch, step); links become aliases of their target."""
    if output.strip() == "MISSING":
        return []
    entries = [line.split("\t", 4) for line in output.splitlines() if line.count("\t") >= 4]
    aliases: dict[str, list[str]] = {}
    for kind, _has, _m, link, name in entries:
        a = _ALIAS.match(name)
        if kind == "l" and a and link:
            aliases.setdefault(link.rstrip("/").rsplit("/", 1)[-1], []).append(a["kind"])
    found = []
    for kind, has, mtime, _link, name in entries:
        if kind != "d":
            continue
        run_id = None
        if m := _EPOCH_STEP.match(name):
            layout, epoch, step = "epoch_step", int(m["e"]), int(m["s"])
        elif m := _EPOCH.match(name):
            layout, epoch, step = "epoch", int(m["e"]), None
        elif m := _RUN_STEP.match(name):
            layout, epoch, step, run_id = "run_step", None, int(m["s"]), m["run"]
        else:
            continue
        found.append(
            Checkpoint(
                name=name,
                path=f"{output_dir.rstrip('/')}/{name}",
                layout=layout,
                epoch=epoch,
                step=step,
                servable="c" in has and "w" in has,
                has_training_state="t" in has,
                mtime=float(mtime) if mtime.isdigit() else None,
                run_id=run_id,
                aliases=tuple(sorted(aliases.get(name, []))),
            )
        )
    return sorted(
        found,
        key=lambda c: (c.epoch if c.epoch is not None else -1, c.step if c.step is not None else -1, c.name),
    )


async def discover_checkpoints(target: Target, output_dir: str) -> list[Checkpoint]:
    """The checkpoints in a training output directory on the target (empty while none is saved)."""
    res = await target.run(["sh", "-c", LIST_SH, "sh", output_dir], timeout=60)
    if res.rc != 0:
        raise HarnessError(f"{target.name}: cannot list {output_dir}: {res.stderr.strip()[:300]}")
    return parse_listing(res.stdout, output_dir)


def build_export_argv(
    checkpoint: str,
    *,
    draft_config: str,
    output_dir: str,
    vocab_mapping: str | None = None,
    python: str = "python3",
) -> list[str]:
    """`specforge export --to sglang ...` (CLI era), through the target's python like the trainer."""
    argv = [
        python,
        "-m",
        "specforge.cli",
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        checkpoint,
        "--draft-config",
        draft_config,
        "--output-dir",
        output_dir,
    ]
    return argv + (["--vocab-mapping", vocab_mapping] if vocab_mapping else [])


async def export_checkpoint(
    target: Target,
    ckpt: Checkpoint,
    *,
    draft_config: str,
    output_dir: str | None = None,
    vocab_mapping: str | None = None,
    python: str = "python3",
) -> str:
    """Export a CLI-era checkpoint to an SGLang draft directory; returns that directory."""
    out = output_dir or f"{ckpt.path}-sglang"
    argv = build_export_argv(
        ckpt.path, draft_config=draft_config, output_dir=out, vocab_mapping=vocab_mapping, python=python
    )
    res = await target.run(argv, timeout=3600)
    if res.rc != 0 or "exported sglang draft to" not in res.stdout:
        raise HarnessError(
            f"{target.name}: export of {ckpt.path} failed (exit {res.rc}): "
            f"{(res.stderr or res.stdout).strip()[-500:]}"
        )
    return out


def checkpoint_step(path: str) -> tuple[int | None, int | None]:
    """(epoch, step) from a checkpoint path's last component, (None, None) for other drafters."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if m := _EPOCH_STEP.match(name):
        return int(m["e"]), int(m["s"])
    if m := _EPOCH.match(name):
        return int(m["e"]), None
    if m := _RUN_STEP.match(name.removesuffix("-sglang")):
        return None, int(m["s"])
    return None, None
