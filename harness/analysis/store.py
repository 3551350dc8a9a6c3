"""The run directory's saved records, typed, and the one place that writes and reads them.

requests.csv holds `records.RequestRecord` rows, phases.csv `PhaseRecord` rows, variants.jsonl one
`VariantMeta` per line and tune_state.json a `TuneState`. Rows are appended whole and fsynced (`CsvAppender`;
a row cut by a kill is repaired before the next append, harness.analysis.csv_tail); a JSON line cut mid-write
is skipped when read. Files of earlier releases read as before: a field they lack is absent (its default),
a key this release does not declare is kept and written back where it was. "True"/"False" cells are parsed
once, here.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict

from harness.analysis.csv_tail import repair_tail
from harness.analysis.records import RequestRecord
from harness.common.errors import HarnessError, InputError

PHASES_FILE = "phases.csv"
VARIANTS_FILE = "variants.jsonl"
TUNE_STATE_FILE = "tune_state.json"


# ---------------------------------------------------------------------------------------------------- CSV
class RecordWriteError(HarnessError):
    """A row could not be written (a full disk, an I/O error): the run stops, naming the file."""


class CsvAppender:
    """Append rows to a CSV file, one flush per row, so a crash or Ctrl-C keeps every finished row.
    A file cut mid-row is repaired first (harness.analysis.csv_tail); `repaired` says what was done."""

    def __init__(self, path: str | Path, columns: list[str]):
        self.path = Path(path)
        try:
            new = not self.path.exists() or self.path.stat().st_size == 0
            if not new:  # a resumed run appends under the header the file already has (an older release's)
                with open(self.path, newline="", encoding="utf-8") as fh:
                    columns = next(csv.reader(fh), None) or columns
            self.columns = columns
            self.repaired = repair_tail(self.path, columns)
            new = not self.path.exists() or self.path.stat().st_size == 0
            self._fh: IO[str] = open(self.path, "a", newline="", encoding="utf-8")  # noqa: SIM115
        except (PermissionError, IsADirectoryError) as exc:  # a run directory we may not write: bad input
            raise InputError(str(self.path), None, None, f"cannot write records: {exc.strerror}") from None
        except OSError as exc:
            raise RecordWriteError(f"{self.path}: cannot write records: {exc.strerror or exc}") from exc
        self._writer = csv.DictWriter(self._fh, fieldnames=columns, extrasaction="ignore")
        if new:
            self._write(self._writer.writeheader)

    def _write(self, write: Callable[..., object], *args: object) -> None:
        try:
            write(*args)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            self._abandon()
            raise RecordWriteError(f"{self.path}: could not write a record: {exc.strerror or exc}"
                                   + (" (the disk is full)" if exc.errno == errno.ENOSPC else "")) from exc

    def _abandon(self) -> None:
        """After a failed write: close anyway (the close's own flush fails too; the file is closed all the
        same)."""
        with contextlib.suppress(OSError, ValueError):
            self._fh.close()

    def append(self, row: dict[str, Any]) -> None:
        self._write(self._writer.writerow, {k: ("" if v is None else v) for k, v in row.items()})

    def close(self) -> None:
        if not self._fh.closed:
            self._abandon()

    def __enter__(self) -> CsvAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_record(appender: CsvAppender, record: RequestRecord) -> None:
    """A requests.csv row (records.RECORD_COLUMNS)."""
    appender.append(asdict(record))


def read_rows(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows as text (none when the file is absent)."""
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def parse_bool(text: str | None) -> bool | None:
    """A CSV cell written from a bool ("True"/"False"); None when empty or anything else."""
    return {"True": True, "False": False}.get(text or "")


def parse_count(text: str | None) -> int:
    """A count cell: 0 when empty or unreadable (an older or damaged row counts nothing)."""
    try:
        return int(float(text or ""))
    except (TypeError, ValueError):
        return 0


def parse_float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def parse_ints(text: str | None) -> list[int]:
    """A space-separated list cell (chunk_tokens, spec_histogram)."""
    return [int(x) for x in (text or "").split()]


def parse_floats(text: str | None) -> list[float]:
    """A space-separated list cell (chunk_offsets_ms)."""
    return [float(x) for x in (text or "").split()]


# ---------------------------------------------------------------------------------------------------- phases
@dataclass(slots=True)
class PhaseRecord:
    """One row of phases.csv: a phase as measured, written after its last record (harness.analysis.attempts
    says why a phase without one is replayed whole)."""

    variant: str
    phase: str  # harness.bench.run_phases.phase_id
    suite: str
    concurrency: int  # 0 for a request-rate phase
    repeat: int
    requests: int  # finished ok
    errors: int
    output_tokens: int  # of the ok requests, from the server's usage
    wall_s: float | None
    server_accept_len: float | None  # the phase's own counter delta, else the server's running mean
    flush_ok: bool | None  # the cache flush before the phase worked (None: not recorded)
    last_gen_throughput: float | None
    server: dict[str, Any] = field(default_factory=dict)  # the engine's columns (engines.phase_columns)
    passes: int | None = 1  # passes over the suite (harness.bench.sizing); None in runs before phase sizing

    def row(self) -> dict[str, Any]:
        """The CSV row (the engine's columns by their own names)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        return {**out, **self.server}

    @classmethod
    def from_row(cls, row: dict[str, str]) -> PhaseRecord:
        own = {f.name for f in fields(cls)}
        return cls(variant=row.get("variant") or "", phase=row.get("phase") or "",
                   suite=row.get("suite") or "",
                   concurrency=parse_count(row.get("concurrency")), repeat=parse_count(row.get("repeat")),
                   requests=parse_count(row.get("requests")), errors=parse_count(row.get("errors")),
                   output_tokens=parse_count(row.get("output_tokens")), wall_s=parse_float(row.get("wall_s")),
                   server_accept_len=parse_float(row.get("server_accept_len")),
                   flush_ok=parse_bool(row.get("flush_ok")),
                   last_gen_throughput=parse_float(row.get("last_gen_throughput")),
                   server={k: _engine_cell(v) for k, v in row.items() if k is not None and k not in own},
                   passes=parse_count(row["passes"]) if row.get("passes") else None)


def _engine_cell(text: str | None) -> float | str | None:
    """An engine's per-phase cell: a number, or the engine's own text (vLLM's per-position rates), or None."""
    number = parse_float(text)
    return number if number is not None or not text else text


def read_phases(run_dir: Path) -> list[PhaseRecord]:
    return [PhaseRecord.from_row(row) for row in read_rows(run_dir / PHASES_FILE)]


# ---------------------------------------------------------------------------------------------------- JSON
def write_json(path: str | Path, data: object) -> None:
    """Whole or not at all: written beside, then renamed over."""
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def append_jsonl(path: str | Path, entry: dict[str, Any]) -> None:
    """One JSON line appended, on a line of its own even when the file was cut mid-line by a kill."""
    path = Path(path)
    lead = ""
    with contextlib.suppress(OSError):
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():
                fh.seek(-1, os.SEEK_END)
                lead = "" if fh.read(1) == b"\n" else "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(lead + json.dumps(entry, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a blank line, or one cut by a kill mid-write, is skipped."""
    out: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict):
                out.append(d)
    return out


# ------------------------------------------------------------------------------------------------- variants
class VariantMeta(BaseModel):
    """A variants.jsonl line: one variant's server as the run found it. The runner writes a line whenever
    the variant's state changes (ready to measure, done, failed, interrupted); a line holds the fields
    known by then, in the order below (the order they are learnt). A field not yet learnt is absent from the
    line, one learnt as null (an existing server's pgid) is written as null: `model_fields_set` tells them
    apart."""

    model_config = ConfigDict(extra="forbid")

    variant: str
    engine: str | None = None  # absent in runs before a plan could name its engine (sglang then)
    engine_version: str | None = None  # as detected on the target before the first start
    baseline: bool = False
    algorithm: str = ""
    drafter: str = ""
    drafter_path: str = ""
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    cuda_graph: bool = True
    simulated: bool = False
    status: str = ""  # running | ok | failed | interrupted
    temperature: float | None = None
    sampling: str | None = None  # the variant's sampling arm (run.sampling), None: run.temperature alone
    forced_acceptance: float | None = None  # a server forced to an accept length (harness.analysis.forced)
    synthetic_suites: list[str] | None = None  # the plan's suites marked synthetic (import-suite --synthetic)
    port: int | None = None
    pgid: int | None = None  # None: a server draftbench did not start
    launch_command: list[str] | str = ""  # redacted argv ("" for an existing server)
    startup_s: float | None = None
    # the engine's own facts about its server (Engine.server_provenance: server_*, sglang_version, ...), flat
    # in the line; a line read back keeps here any key this release does not declare
    server_facts: dict[str, Any] = {}
    started_by_draftbench: bool | None = None  # False for an `endpoint:` variant
    endpoint: str | None = None
    drafter_config_sha256: str | None = None
    gpus: list[str] | None = None
    per_request_spec: str | None = None  # stream | meta_info | off (Engine.spec_mode)
    warmup_first_s: float | None = None
    compile_s: float | None = None  # a one-off compile in the first decode (harness.bench.run_phases.one_off)
    failure: str | None = None
    last_log_lines: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The line's keys and values, in order."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            if name == "server_facts":
                out.update(self.server_facts)
            elif name in self.model_fields_set:
                out[name] = self.__dict__[name]
        return out

    def to_line(self) -> str:
        return json.dumps(self.as_dict(), default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantMeta:
        """A line as written (no validation: what an older release wrote reads back as it was)."""
        own = {k: v for k, v in data.items() if k in cls.model_fields and k != "server_facts"}
        facts = {k: v for k, v in data.items() if k not in own}
        return cls.model_construct(**own, server_facts=facts)


def append_variant(run_dir: Path, meta: VariantMeta) -> None:
    append_jsonl(run_dir / VARIANTS_FILE, meta.as_dict())


def read_variants(run_dir: Path) -> dict[str, VariantMeta]:
    """variants.jsonl: the last entry per variant wins, over the keys of its earlier ones (a resumed run
    appends)."""
    merged: dict[str, dict[str, Any]] = {}
    for d in read_jsonl(Path(run_dir) / VARIANTS_FILE):
        if "variant" in d:
            merged[d["variant"]] = {**merged.get(d["variant"], {}), **d}
    return {name: VariantMeta.from_dict(d) for name, d in merged.items()}


# ---------------------------------------------------------------------------------------------------- tune
@dataclass(slots=True)
class TuneDecision:
    """A candidate the tune chose to measure, and what it knew when it chose."""

    config: str  # tune_model.Config.name, or the baseline's name
    spent_s: float
    est_cost_s: float
    budget_s: float
    expected_speedup: float | None
    adopted: bool | None = None  # True: the wide run's own server, measured where it stood (else not written)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.adopted is None:
            del out["adopted"]
        return out


_TUNE_LATER = ("warnings", "preflight_done", "adopted", "winners", "stop_failed", "crossover", "short")


@dataclass
class TuneState:
    """tune_state.json: a tune's bookkeeping. The run directories are the source of truth; this says what
    was decided, so a resume replays the same decisions (harness.studies.tune). The fields after `starts` are
    written once set, in the order they were first set; keys of another release are kept (`extra`)."""

    spent_s: float = 0.0  # over every session of the tune
    # "sub/variant" -> from its server's start to its end, summed over its servers and the tune's sessions
    stage_s: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # variant -> why its server failed
    rejected: dict[str, str] = field(default_factory=dict)  # config -> the preflight error that kept it back
    decisions: list[TuneDecision] = field(default_factory=list)
    stop_reason: str = ""  # confirmed | grid-exhausted | budget | failed ("" while going)
    stage: str = "wide"
    starts: int = 0  # servers started (adopted ones are no start)
    warnings: list[str] | None = None  # the preflight's phase-too-short warnings
    preflight_done: bool | None = None
    adopted: list[str] | None = None  # "sub/variant" measured on a server another sub-run kept
    winners: list[str] | None = None
    stop_failed: str | None = None  # stopping the kept servers at the end failed: why
    # --concurrency auto: the batches bisected, the pick, the sides' verdicts (studies.tune_crossover)
    crossover: dict[str, Any] | None = None
    # the search stopped on its budget: what it could not buy, what that needs, what was left (tune_budget)
    short: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: object) -> None:
        if name not in _TUNE_FIELDS:
            raise AttributeError(f"TuneState has no field {name!r}")
        object.__setattr__(self, name, value)
        order = self.__dict__.setdefault("_order", [])  # the later fields as first set (or as read)
        if name in _TUNE_LATER and value is not None and name not in order:
            order.append(name)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)
                               if f.name not in _TUNE_LATER and f.name != "extra"}
        out["decisions"] = [d.as_dict() for d in self.decisions]
        for name in self.__dict__.get("_order", []):
            out[name] = self.extra[name] if name in self.extra else getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuneState:
        state = cls()
        own = {f.name for f in fields(cls)} - {"extra"}
        for key, value in data.items():
            if key == "decisions":
                state.decisions = [TuneDecision(**d) for d in value]
            elif key in own:
                setattr(state, key, value)
                # a later field written as null (set once, cleared since) keeps its place too
                if key in _TUNE_LATER and key not in state.__dict__["_order"]:
                    state.__dict__["_order"].append(key)
            else:
                state.extra[key] = value
                state.__dict__["_order"].append(key)  # written back where it was
        return state


_TUNE_FIELDS = frozenset(f.name for f in fields(TuneState))


def read_tune_state(tune_dir: Path) -> TuneState:
    """A tune directory's state (a fresh one when the tune has written none yet)."""
    path = Path(tune_dir) / TUNE_STATE_FILE
    return TuneState.from_dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else TuneState()


def write_tune_state(tune_dir: Path, state: TuneState) -> None:
    write_json(Path(tune_dir) / TUNE_STATE_FILE, state.as_dict())
