"""Records cut mid-row (a kill, a full disk) are repaired before anything is appended to them; a row glued
onto a cut one is refused with its line; a full disk is an error naming the file; a malformed CSV is a
one-line error for `draftbench summary`, not a pandas traceback."""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.csv_tail import repair_tail
from harness.analysis.store import CsvAppender, RecordWriteError
from harness.cli import main as cli_main
from harness.common.errors import InputError
from tests.faults_helpers import GOOD, SIM_LAUNCHER, prompts, read_csv, reap_servers, sim_env, write_plan

COLS = ["a", "b", "note"]


def _write(path: Path, rows: list[list[str]]) -> None:
    with CsvAppender(path, COLS) as out:
        for r in rows:
            out.append(dict(zip(COLS, r, strict=True)))


def test_a_cut_last_row_is_removed_and_every_whole_row_kept(tmp_path: Path):
    path = tmp_path / "requests.csv"
    _write(path, [["1", "x", "multi\nline"], ["2", "y", "z"]])
    whole = path.read_bytes()
    path.write_bytes(whole + b'3,"cut in a quo')  # a kill mid-row, inside a quoted field
    out = CsvAppender(path, COLS)
    assert out.repaired == f"{path}:5: the last line was cut mid-row (15 bytes): removed it, kept the 2 " \
        "complete rows"
    out.append({"a": "4", "b": "w", "note": ""})
    out.close()
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [COLS, ["1", "x", "multi\nline"], ["2", "y", "z"], ["4", "w", ""]]
    assert pd.read_csv(path).shape == (3, 3)


def test_a_whole_file_is_left_alone(tmp_path: Path):
    path = tmp_path / "requests.csv"
    _write(path, [["1", "x", ""]])
    before = path.read_bytes()
    assert repair_tail(path, COLS) is None and path.read_bytes() == before


def test_a_row_glued_onto_a_cut_one_is_refused_with_its_line(tmp_path: Path):
    path = tmp_path / "requests.csv"
    _write(path, [["1", "x", ""], ["2", "y", ""]])
    path.write_bytes(path.read_bytes() + b"3,z")  # cut ...
    with open(path, "a", newline="") as fh:  # ... then appended to, as a resume did before
        csv.writer(fh).writerow(["4", "w", ""])
        csv.writer(fh).writerow(["5", "v", ""])
    with pytest.raises(InputError) as err:
        CsvAppender(path, COLS)
    assert str(err.value).startswith(f"{path}:4: 4 fields where the header has 3")


def test_a_failed_write_names_the_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "requests.csv"
    out = CsvAppender(path, COLS)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("harness.analysis.store.os.fsync", full)
    with pytest.raises(RecordWriteError, match=f"^{path}: could not write a record: No space left on device "
                                               r"\(the disk is full\)$"):
        out.append({"a": "1", "b": "x", "note": ""})
    out.close()  # no second error from the close


def _run_dir(tmp_path: Path, rows: bytes) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.csv").write_bytes(rows)
    return run


def test_summary_of_a_malformed_csv_is_one_line_naming_file_and_line(tmp_path: Path, capsys):
    good = tmp_path / "seed"
    good.mkdir()
    _write(good / "x.csv", [["1", "x", ""], ["2", "y", ""]])
    body = (good / "x.csv").read_bytes() + b"3,z,,,4,w,\r\n"
    run = _run_dir(tmp_path, body)
    assert cli_main(["summary", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {run / 'requests.csv'}:4: malformed CSV: 7 fields where the header has 3 "
                   "(a line cut and appended to?)")


# ---- end to end on the stand-in ---------------------------------------------------------------------------


def _plan(tmp_path: Path, n: int = 6) -> Path:
    return write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                      env=sim_env(0.05), variants=[{"name": "baseline"}, GOOD], suite_prompts=prompts(n),
                      run={"concurrency": [2], "max_tokens": 16})


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def test_a_full_disk_stops_the_run_with_the_file_named(tmp_path: Path, monkeypatch, capsys):
    real = os.fsync
    rows = {"n": 0}

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("requests.csv"):
            rows["n"] += 1
            if rows["n"] > 4:  # the header and three rows, then the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr("harness.analysis.store.os.fsync", fsync)
    rc = cli_main(["run", str(_plan(tmp_path)), "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 1, err
    run_dir = next((tmp_path / "results").iterdir())
    line = f"error: {run_dir / 'requests.csv'}: could not write a record: No space left on device " \
        "(the disk is full)"
    assert line in err.splitlines(), err
    assert "Traceback" not in err
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "incomplete"


def test_resume_after_a_cut_row_repairs_it_and_says_so(tmp_path: Path, capsys):
    results = tmp_path / "results"
    assert cli_main(["run", str(_plan(tmp_path, 4)), "--results-dir", str(results)]) == 0
    run_dir = next(results.iterdir())
    path = run_dir / "requests.csv"
    rows = read_csv(path)
    data = path.read_bytes()
    last = data.rstrip(b"\r\n").rfind(b"\n") + 1
    path.write_bytes(data[:last + (len(data) - last) // 2])  # the last row cut in the middle
    (run_dir / "provenance.json").write_text(json.dumps({
        **json.loads((run_dir / "provenance.json").read_text()), "status": "running"}))
    capsys.readouterr()
    rc = cli_main(["run", "--resume", str(run_dir)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"WARNING records-repaired: {path}:{len(rows) + 1}: the last line was cut mid-row" in err
    after = read_csv(path)
    assert all(len(r) == len(rows[0]) and None not in r.values() for r in after)  # every row whole
    assert cli_main(["summary", str(run_dir)]) == 0


def test_a_jsonl_cut_mid_line_keeps_the_next_entry_whole(tmp_path: Path):
    from harness.analysis.rundir import append_jsonl, leftover_servers
    from harness.analysis.summary import read_variants

    servers = tmp_path / "servers.jsonl"
    append_jsonl(servers, {"variant": "a", "pgid": 11, "state": "started"})
    servers.write_bytes(servers.read_bytes() + b'{"variant": "a", "pgid": 11, "sta')  # a kill mid-write
    append_jsonl(servers, {"variant": "b", "pgid": 12, "state": "started"})
    assert [e["pgid"] for e in leftover_servers(servers)] == [11, 12]  # both found, the cut line skipped
    servers.unlink()  # (the fixture's reaper reads every servers.jsonl strictly)
    variants = tmp_path / "variants.jsonl"
    append_jsonl(variants, {"variant": "a", "status": "ok"})
    variants.write_bytes(variants.read_bytes() + b'{"variant": "b", "sta')
    append_jsonl(variants, {"variant": "c", "status": "ok"})
    assert set(read_variants(tmp_path)) == {"a", "c"}
