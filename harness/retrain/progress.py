"""SpecForge training progress, parsed from its log (REFERENCE §8.5), every format by version:

* tqdm bars (script era, rank 0, stderr), redrawn with `\\r` in a file: `Training Epoch 0:  12%|█▏   |
  1203/10000 [10:02<1:13:20,  2.00it/s, loss=4.21, acc=0.52, time=0.50s]` (2026 adds acceptance_rate,
  grad_norm); `Evaluating Epoch N: ...`; the CLI era's `Training: ...` bar (TTY only);
* v0.1.0 per-epoch prints `Train Epoch [e/E], position i,  Acc: 0.52` / `pLoss: 1.23` (and `Eval Epoch`);
* v0.2.0+ `Eval - Step S [S+1/E], position i,  Acc: ...` / `pLoss:` / `Acceptance Rate:` (printed for
  train and eval alike, and only when something configured logging);
* CLI era `step N: {python dict}`;
* `Saved full training state to DIR/training_state.pt`, `Saved model configuration to DIR`,
  `Training completed at step N, saving final checkpoint...`, `Starting training from epoch:E  step:S`,
  `Restored optimizer/scheduler state: epoch=E, step=S, lr=X`, `exported sglang draft to DIR`.

Lines may carry a logging prefix, so every pattern is searched, not anchored at the line start.
"""

from __future__ import annotations

import ast
import codecs
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SPLIT = re.compile(r"(\r\n|\r|\n)")
_INTERVAL = r"(?:\d+:)?\d+:\d+"
_TQDM = re.compile(
    rf"(?P<desc>[^\r\n]*?):\s+(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    rf"\[(?P<elapsed>{_INTERVAL})<(?P<remaining>{_INTERVAL}|\?),\s*(?P<rate>[^,\]]*?)(?:,\s*(?P<postfix>[^\]]*))?\]"
)
_TQDM_NOTOTAL = re.compile(
    rf"(?P<desc>[^\r\n]*?):\s+(?P<n>\d+)(?P<unit>it|step)s?\s+\[(?P<elapsed>{_INTERVAL}),\s*(?P<rate>[^,\]]*?)"
    r"(?:,\s*(?P<postfix>[^\]]*))?\]"
)
_RATE = re.compile(r"(?P<v>[\d.]+)\s*(?P<u>[A-Za-z]+)/(?P<d>[A-Za-z]+)")
_DESC_EPOCH = re.compile(r"(?P<what>Training|Evaluating)(?: Epoch (?P<epoch>\d+))?\s*$")
_V01 = re.compile(
    r"(?P<phase>Train|Eval) Epoch \[(?P<e>\d+)/(?P<E>\d+)\], position (?P<i>\d+),\s+"
    r"(?P<key>Acc|pLoss): (?P<v>\S+)"
)
_V02 = re.compile(
    r"Eval - Step (?P<s>\d+) \[\d+/(?P<E>\d+)\], position (?P<i>\d+),\s+"
    r"(?P<key>Acc|pLoss|Acceptance Rate): (?P<v>\S+)"
)
_STEP_DICT = re.compile(r"(?:^|\s|\])step (?P<s>\d+): (?P<d>\{.*\})\s*$")
_SAVED = re.compile(
    r"Saved (?:full training state|model configuration) to (?P<p>.+?)(?:/training_state\.\w+)?\s*$"
)
_COMPLETED = re.compile(r"Training completed at step (?P<s>\d+)")
_STARTING = re.compile(r"Starting training from epoch:\s*(?P<e>\d+)\s+step:\s*(?P<s>\d+)")
_RESTORED = re.compile(
    r"Restored optimizer/scheduler state: epoch=(?P<e>\d+), step=(?P<s>\d+)(?:, lr=(?P<lr>\S+))?"
)
_EXPORTED = re.compile(r"exported sglang draft to (?P<p>.+?)\s*$")
CKPT_DIR = re.compile(r"(?:^|/)epoch_(?P<e>\d+)(?:_step_(?P<s>\d+))?/?$")
_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
_V_KEYS = {"Acc": "acc", "pLoss": "ploss", "Acceptance Rate": "acceptance_rate"}


@dataclass(frozen=True)
class ProgressUpdate:
    """What one log record says. `step` is the bar's position within the epoch for kind "bar", else the
    global (optimizer) step."""

    kind: str  # "bar" | "metrics" | "saved" | "completed" | "started" | "restored" | "exported"
    phase: str | None = None  # "train" | "eval" | None (unknown: v0.2.0 prints "Eval" for both)
    epoch: int | None = None  # 0-based
    num_epochs: int | None = None
    step: int | None = None
    total: int | None = None  # bar length (steps in the epoch)
    elapsed_s: float | None = None
    eta_s: float | None = None  # bar's remaining time (this epoch)
    rate: float | None = None  # steps per second
    metrics: dict[str, float] = field(default_factory=dict)
    path: str | None = None


def parse_interval(text: str) -> float | None:
    """tqdm's `[H:]MM:SS` (hours may exceed 24) -> seconds; None for `?`."""
    if not text or text == "?":
        return None
    secs = 0
    for part in text.split(":"):
        if not part.isdigit():
            return None
        secs = secs * 60 + int(part)
    return float(secs)


def parse_rate(text: str) -> float | None:
    """`2.00it/s` -> 2.0, `10.00s/it` -> 0.1, `?it/s` -> None (steps per second)."""
    m = _RATE.search(text or "")
    if not m:
        return None
    v = float(m["v"])
    if m["u"] == "s" and m["d"] != "s":  # s/it
        return 1.0 / v if v > 0 else None
    return v


def _number(text: str) -> float | None:
    t = text.strip().rstrip(",")
    if t.endswith("s") and not t.endswith(("inf", "nans")):
        t = t[:-1]  # time=0.50s
    try:
        return float(t)
    except ValueError:
        return None


def parse_postfix(text: str | None) -> dict[str, float]:
    """`loss=4.21, acc=0.52, time=0.50s` -> {"loss": 4.21, "acc": 0.52, "time": 0.5}; non-numbers dropped."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        key, eq, value = part.partition("=")
        if eq and (num := _number(value)) is not None:
            out[key.strip()] = num
    return out


def _bar(m: re.Match, total: int | None) -> ProgressUpdate:
    desc = _DESC_EPOCH.search(m["desc"].strip())
    phase = epoch = None
    if desc:
        phase = "eval" if desc["what"] == "Evaluating" else "train"
        epoch = int(desc["epoch"]) if desc["epoch"] is not None else None
    groups = m.groupdict()
    return ProgressUpdate(
        "bar",
        phase=phase,
        epoch=epoch,
        step=int(m["n"]),
        total=total,
        elapsed_s=parse_interval(m["elapsed"]),
        eta_s=parse_interval(groups.get("remaining") or ""),
        rate=parse_rate(m["rate"]),
        metrics=parse_postfix(m["postfix"]),
    )


def _literal_dict(text: str) -> dict[str, Any] | None:
    try:
        obj = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        # float('nan') / float('inf') print as bare names, which literal_eval refuses
        try:
            obj = ast.literal_eval(
                _NONFINITE.sub(lambda m: f"{m[1]}1e999" if m[2] == "inf" else "None", text)
            )
        except (ValueError, SyntaxError):
            return None
    return obj if isinstance(obj, dict) else None


def _step_metrics(d: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in d.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[str(key)] = float(value)
        elif value is None:
            out[str(key)] = math.nan
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, int | float) and not isinstance(item, bool):
                    out[f"{key}_{i}"] = float(item)
    return out


def parse_line(line: str) -> ProgressUpdate | None:
    """The progress a single log record carries, or None for any other line."""
    text = _ANSI.sub("", line).strip()
    if not text:
        return None
    if "%|" in text and (m := _TQDM.search(text)):
        return _bar(m, int(m["total"]))
    if (m := _STEP_DICT.search(text)) and (d := _literal_dict(m["d"])) is not None:
        metrics = _step_metrics(d)
        step_time = metrics.get("perf/optimizer_step_time_s")
        return ProgressUpdate(
            "metrics",
            phase="train",
            step=int(m["s"]),
            metrics=metrics,
            rate=1.0 / step_time if step_time and step_time > 0 else None,
        )
    if m := _V02.search(text):
        return ProgressUpdate(
            "metrics",
            step=int(m["s"]),
            num_epochs=int(m["E"]),
            metrics={f"{_V_KEYS[m['key']]}_{m['i']}": _number(m["v"]) or 0.0},
        )
    if m := _V01.search(text):
        return ProgressUpdate(
            "metrics",
            phase="train" if m["phase"] == "Train" else "eval",
            epoch=int(m["e"]) - 1,
            num_epochs=int(m["E"]),
            metrics={f"{_V_KEYS[m['key']]}_{m['i']}": _number(m["v"]) or 0.0},
        )
    if m := _SAVED.search(text):
        path = m["p"].rstrip("/")
        ck = CKPT_DIR.search(path)
        return ProgressUpdate(
            "saved",
            path=path,
            epoch=int(ck["e"]) if ck else None,
            step=int(ck["s"]) if ck and ck["s"] else None,
        )
    if m := _COMPLETED.search(text):
        return ProgressUpdate("completed", step=int(m["s"]))
    if m := _STARTING.search(text):
        return ProgressUpdate("started", epoch=int(m["e"]), step=int(m["s"]))
    if m := _RESTORED.search(text):
        lr = _number(m["lr"]) if m["lr"] else None
        return ProgressUpdate(
            "restored", epoch=int(m["e"]), step=int(m["s"]), metrics={"lr": lr} if lr is not None else {}
        )
    if m := _EXPORTED.search(text):
        return ProgressUpdate("exported", path=m["p"])
    if m := _TQDM_NOTOTAL.search(text):
        return _bar(m, None)
    return None


class RecordSplitter:
    """Bytes of a log -> records split on `\\r` and `\\n` (tqdm redraws in place with `\\r`). Each record
    comes with whether it ended a line (`\\n`) or was a redraw (`\\r`); a partial record waits for more."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, data: bytes) -> list[tuple[str, bool]]:
        text = self._partial + self._decoder.decode(data)
        parts = _SPLIT.split(text)
        self._partial = parts.pop()  # text after the last terminator
        out: list[tuple[str, bool]] = []
        for i in range(0, len(parts), 2):
            record, term = parts[i], parts[i + 1]
            if record:
                out.append((record, term != "\r"))
        return out

    def flush(self) -> list[tuple[str, bool]]:
        rest, self._partial = self._partial + self._decoder.decode(b"", final=True), ""
        return [(rest, True)] if rest else []


@dataclass(frozen=True)
class TrainProgress:
    """A training job as its log shows it; `follow_job` yields one per batch of log records."""

    job_id: str
    state: str = "running"  # "running" | "finished" | "failed" | "cancelled" | "lost"
    phase: str | None = None
    epoch: int | None = None  # 0-based, as SpecForge numbers epochs in its bars and directories
    num_epochs: int | None = None
    step: int | None = None  # within the epoch (bar position)
    steps_in_epoch: int | None = None
    global_step: int | None = None
    total_steps: int | None = None  # when known (CLI-era max_steps, or epochs x steps per epoch)
    loss: float | None = None
    acc: float | None = None
    acceptance_rate: float | None = None
    grad_norm: float | None = None
    lr: float | None = None
    rate: float | None = None  # steps per second
    eta_s: float | None = None  # whole run when the number of epochs or steps is known, else this epoch
    metrics: dict[str, float] = field(default_factory=dict)  # latest value of every metric seen
    checkpoints: tuple[str, ...] = ()  # directories reported saved, in order
    completed: bool = False  # "Training completed" seen
    exit_code: int | None = None
    lines: tuple[str, ...] = ()  # log lines (newline-terminated records) since the previous event
    bar: str = ""  # the latest tqdm bar as drawn


class ProgressState:
    """Folds ProgressUpdates into the current TrainProgress."""

    def __init__(self, job_id: str, *, num_epochs: int | None = None, total_steps: int | None = None):
        self.p = TrainProgress(job_id, num_epochs=num_epochs, total_steps=total_steps)

    def feed(self, u: ProgressUpdate) -> None:
        p = self.p
        metrics = {**p.metrics, **u.metrics}
        changes: dict[str, Any] = {"metrics": metrics}
        if u.num_epochs is not None:
            changes["num_epochs"] = u.num_epochs
        if u.kind == "bar":
            changes.update(phase=u.phase, step=u.step)
            if u.epoch is not None:
                changes["epoch"] = u.epoch
            if u.phase != "eval":
                changes.update(steps_in_epoch=u.total or p.steps_in_epoch, rate=u.rate or p.rate)
                epoch = u.epoch if u.epoch is not None else p.epoch
                if epoch is not None and u.total and u.step is not None:
                    changes["global_step"] = epoch * u.total + u.step
        elif u.kind in ("metrics", "started", "restored", "completed") and u.step is not None:
            if u.kind != "metrics" or u.phase != "eval":
                changes["global_step"] = u.step
            if u.kind in ("started", "restored") and u.epoch is not None:
                changes["epoch"] = u.epoch
            if u.rate is not None:
                changes["rate"] = u.rate
        elif u.kind == "saved" and u.path and u.path not in p.checkpoints:
            changes["checkpoints"] = (*p.checkpoints, u.path)
        if u.kind == "completed":
            changes["completed"] = True
        if u.phase != "eval":
            for key in ("loss", "acc", "acceptance_rate", "grad_norm", "lr"):
                if key in u.metrics:
                    changes[key] = u.metrics[key]
        self.p = replace(p, **changes)
        self.p = replace(self.p, eta_s=self._eta(u))

    def _eta(self, u: ProgressUpdate) -> float | None:
        p = self.p
        if p.total_steps and p.global_step is not None and p.rate:
            return max(0.0, (p.total_steps - p.global_step) / p.rate)
        if u.kind != "bar" or u.phase == "eval":
            return p.eta_s
        if u.eta_s is None:
            return None
        left_epochs = (p.num_epochs - 1 - p.epoch) if p.num_epochs is not None and p.epoch is not None else 0
        if left_epochs > 0 and p.rate and p.steps_in_epoch:
            return u.eta_s + left_epochs * p.steps_in_epoch / p.rate
        return u.eta_s

    def feed_records(self, records: list[tuple[str, bool]]) -> TrainProgress:
        """Fold a batch of records; the returned snapshot carries the batch's complete lines and last bar."""
        lines: list[str] = []
        bar = self.p.bar
        for text, is_line in records:
            clean = _ANSI.sub("", text)
            u = parse_line(clean)
            if u is not None:
                self.feed(u)
                if u.kind == "bar":
                    bar = clean.strip()
            if is_line:
                lines.append(clean)
        self.p = replace(self.p, lines=tuple(lines), bar=bar)
        return self.p
