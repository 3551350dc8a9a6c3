"""The CLI's results table: the columns that decide by default (`--wide`: every column), notes in plain words
one a line, a legend of exactly the notes that appear, and README.md's sample block held to a real demo's
summary.csv (tests/fixtures/demo-summary.csv)."""

from __future__ import annotations

import asyncio
import io
import re
import shutil

import pandas as pd
import pytest

from harness.analysis import table_notes
from harness.analysis.report import (
    LEGEND_WIDTH,
    TABLE_COLUMNS,
    main,
    readme_sample,
    render_table,
    with_readme_sample,
)
from harness.cli.progress import consume
from harness.common import events as ev
from tests.cli_helpers import ROOT, busy_port_fixture, cli_here, run_dirs, small_plan  # noqa: F401 (a fixture)

DEMO_SUMMARY = ROOT / "tests" / "fixtures" / "demo-summary.csv"
SNAP = sorted((ROOT / "tests" / "snapshots" / "results").iterdir())[0]
DECIDING = ["variant", "conc", "accept len", "tok/s", "speedup", "CI", "verdict", "break-even AL", "note"]


def header(table: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith("variant "))
    return re.split(r"\s{2,}", line.strip())


def test_the_readmes_sample_is_the_real_demos_table_line_for_line():
    demo = pd.read_csv(DEMO_SUMMARY)
    # a real demo's summary: its four variants at both levels, every row measured on the stand-in
    assert sorted(set(demo["variant"])) == ["baseline", "good-eagle3", "seed-weak-eagle3", "wrong-flag-eagle"]
    assert sorted(set(demo["concurrency"])) == [1, 4] and demo["simulated"].all()
    assert (demo["status"] == "ok").all() and len(demo) == 8
    expected = render_table(demo).splitlines()
    assert readme_sample((ROOT / "README.md").read_text()) == expected


def test_the_default_columns_are_those_that_decide_and_wide_has_all():
    demo = pd.read_csv(DEMO_SUMMARY)
    narrow, wide = render_table(demo), render_table(demo, wide=True)
    assert header(narrow) == DECIDING
    assert header(wide) == [h for _, h, _ in TABLE_COLUMNS] + ["note"]
    assert max(map(len, narrow.splitlines())) < 170 < max(map(len, wide.splitlines()))
    # the same numbers either way: the CI with its level, the verdict, the break-even
    row = next(ln.split() for ln in narrow.splitlines() if ln.split()[:2] == ["*good-eagle3", "4"])
    assert row[:9] == ["*good-eagle3", "4", "2.94", "787.1", "1.58x", "1.49-1.68", "(97%)", "faster", "1.71"]


def test_a_table_across_engines_keeps_its_engine_and_baseline_columns():
    df = pd.read_csv(DEMO_SUMMARY)
    df.loc[df["variant"] == "wrong-flag-eagle", "engine"] = "vllm"
    assert header(render_table(df))[:4] == ["variant", "engine", "vs", "conc"]


def test_notes_stack_one_a_line_under_their_row():
    table = render_table(pd.read_csv(DEMO_SUMMARY)).splitlines()
    at = next(i for i, ln in enumerate(table) if ln.split()[:2] == ["!wrong-flag-eagle", "4"])
    col = table[at].index(table_notes.SLOWER)
    assert [ln[col:] for ln in table[at:at + 4]] == [table_notes.SLOWER, table_notes.PROBE_CHECKED,
                                                    "break-even measured at batch 4", table_notes.INERT]
    assert all(ln[:col].strip() == "" for ln in table[at + 1:at + 4])  # the other cells blank
    assert all(ln == ln.rstrip() for ln in table)


def _row(**cells) -> dict:
    base = {"variant": "v", "concurrency": 1, "accept_len": 2.5, "tok_s": 100.0, "speedup": 1.2,
            "verdict": "faster", "status": "ok"}
    return {**base, **cells}


# each kind of note: a row that has it, and the words it shows
KINDS = {
    "failed": (_row(status="failed", concurrency=0, failure_reason="port 20994 in use"),
               "FAILED: port 20994 in use"),
    "forced": (_row(forced_acceptance=3.5), "FORCED accept len 3.5: outputs are not the model's"),
    "slower": (_row(slower_than_baseline=True, verdict="slower"), "slower than baseline"),
    "too-short": (_row(too_short=True, verdict="too-short"), "too short to decide"),
    "in-flight": (_row(concurrency=8, mean_in_flight=5.0), "5.0 in flight on average, not 8"),
    "probe": (_row(accept_len_source="probe"), "accept len from a second, untimed pass (checked against the "
                                               "server)"),
    "break-even-batch": (_row(concurrency=4, break_even_batch=4), "break-even measured at batch 4"),
    "output-differs": (_row(output_match=0.5, first_divergence=120), "output differs from the baseline, "
                                                                     "first at char 120 (median)"),
    "flush-failed": (_row(flush_failed=2), "cache flush failed before 2 phase(s)"),
    "inert": (_row(accept_len=1.0), "no draft token accepted (accept len 1.00)"),
    "disagree": (_row(accept_sources_agree=False), "accept-length sources differ by over 5 %"),
}


def _legend(table: str) -> list[str]:
    lines = table.splitlines()
    return lines[lines.index("notes:") + 1:] if "notes:" in lines else []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_note_is_in_plain_words_and_explained_under_the_table_alone(kind):
    row, words = KINDS[kind]
    table = render_table(pd.DataFrame([row]))
    [line] = [ln for ln in table.splitlines() if ln.startswith(("v ", "!v ", "*v ", "*!v ", "!*v "))]
    assert line.rstrip().endswith(words)
    legend = " ".join(" ".join(_legend(table)).split())
    explained = [k for k, text in table_notes.LEGEND.items() if " ".join(text.split()) in legend]
    assert explained == [kind]  # its own line, and no other note's
    assert all(len(ln) <= LEGEND_WIDTH for ln in table.split("\n\n", 1)[1].splitlines())


def test_the_probe_unchecked_says_so():
    table = render_table(pd.DataFrame([_row(accept_len_source="probe-unchecked")]))
    assert table_notes.PROBE_UNCHECKED in table and "untimed pass: the timed requests" in table


def test_no_notes_no_notes_legend_and_the_marks_legend_stays():
    table = render_table(pd.DataFrame([_row(), _row(variant="baseline", verdict="baseline", speedup=1.0)]))
    assert "notes:" not in table
    assert "CI: 95% interval of the speedup" in table and "* fastest at that concurrency" in table
    assert "verdict: faster/slower (CI above/below 1.00x), equivalent" in table


def test_the_old_jargon_is_gone():
    table = render_table(pd.read_csv(DEMO_SUMMARY), wide=True)
    for old in ("untimed replay, checked", "break-even at batch", "sources disagree", "drafter inert"):
        assert old not in table


def test_readme_command_prints_the_block_and_refreshes_a_readme(tmp_path, capsys):
    assert main(["--readme", str(DEMO_SUMMARY)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[-1] == "```" and out[1:-1] == render_table(pd.read_csv(DEMO_SUMMARY)).splitlines()
    readme = tmp_path / "README.md"
    stale = with_readme_sample((ROOT / "README.md").read_text(), "old\ntable")
    readme.write_text(stale)
    assert readme_sample(stale) == ["old", "table"]
    assert main([str(DEMO_SUMMARY), "--update-readme", str(readme)]) == 0
    assert readme.read_text() == (ROOT / "README.md").read_text()  # the rest of the file as it was


def test_readme_command_bad_input_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'none.csv'}: summary.csv not found"
    (tmp_path / "R.md").write_text("no sample here\n")
    assert main([str(DEMO_SUMMARY), "--update-readme", str(tmp_path / "R.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / 'R.md'}: README: no ``` block")


def test_summary_is_narrow_by_default_and_wide_on_request(tmp_path):
    out = cli_here("summary", str(SNAP), "--csv", str(tmp_path / "t.csv"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert header(out.stdout) == DECIDING and "TTFT p50 ms" not in out.stdout
    wide = cli_here("summary", str(SNAP), "--wide", cwd=tmp_path)
    assert wide.returncode == 0, wide.stderr
    assert header(wide.stdout) == [h for _, h, _ in TABLE_COLUMNS] + ["note"]
    # summary.csv (and its export) keep every column
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "t.csv"), pd.read_csv(SNAP / "summary.csv"))


def test_runs_table_is_wide_on_request(tmp_path, busy_port):
    plan = small_plan(tmp_path, port=busy_port)  # the servers cannot bind: a run that ends at once
    out = cli_here("run", str(plan), "--results-dir", "r", "--no-check", "--wide", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert header(out.stdout) == [h for _, h, _ in TABLE_COLUMNS] + ["note"]
    assert "FAILED: the variant's server did not start" in out.stdout  # the legend of its notes
    [run_dir] = run_dirs(tmp_path / "r")
    assert "TTFT p50 ms" not in cli_here("summary", str(run_dir), cwd=tmp_path).stdout


@pytest.mark.parametrize("wide", [False, True])
def test_the_runs_printout_follows_wide(tmp_path, wide):
    run = tmp_path / "run"
    shutil.copytree(SNAP, run)

    async def events():
        yield ev.RunDone(run_dir=str(run), complete=True, failures=0, summary_csv=str(run / "summary.csv"))

    out = io.StringIO()
    assert asyncio.run(consume(events(), out=out, wide=wide)) == 0
    assert ("TTFT p50 ms" in out.getvalue()) is wide


def test_demo_passes_wide_on(monkeypatch):
    import harness.cli.commands as cli_mod
    import harness.cli.demo

    seen = []
    monkeypatch.setattr(harness.cli.demo, "prepare_demo", lambda results_dir: object())
    monkeypatch.setattr(cli_mod, "_execute",
                        lambda plan, results, keep, resume, wide=False: seen.append(wide) or 0)
    assert cli_mod.main(["demo", "--no-check", "--wide"]) == 0
    assert cli_mod.main(["demo", "--no-check"]) == 0
    assert seen == [True, False]
