"""The column registry (harness.analysis.columns, summary_columns): one declaration per summary column, the
summary computed in its dependency order, the tables and docs/metrics.md's column table drawn from it, the
new decode-step speedup on the H200 tune's records, and the records' True/False cells parsed once as read."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis import report, summary_columns, summary_table, verdicts
from harness.analysis.columns import Column, Compute, Registry, Shown, docs_table
from harness.analysis.summary_columns import COLUMNS, SUMMARY_COLUMNS
from harness.analysis.tune_model import predicted_speedup
from tests.fixture_dirs import unpacked

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
METRICS = ROOT / "docs" / "metrics.md"


def _f(*_args):
    return None


def _g(*_args):
    return None


def _h(*_args):
    return None


# ------------------------------------------------------------------------------------------ the registry
def test_computes_run_after_what_they_need_whatever_the_declaration_order():
    reg = Registry([
        Column("ratio", "", "float", "d", "", _h, needs=("a", "b"), scope="table"),
        Column("b", "", "float", "d", "", _g, needs=("a",)),
        Column("a", "", "float", "d", "", _f),
    ])
    assert [c.fn for c in reg.computes] == [_f, _g, _h]
    assert reg.csv_columns == ["ratio", "b", "a"]  # summary.csv keeps the declaration order


def test_a_missing_column_a_cycle_or_a_scope_inversion_is_refused():
    with pytest.raises(ValueError, match="'b' needs 'nowhere', which no computed column declares"):
        Registry([Column("b", "", "float", "d", "", _g, needs=("nowhere",))])
    with pytest.raises(ValueError, match="wait on each other"):
        Registry([Column("a", "", "float", "d", "", _f, needs=("b",)),
                  Column("b", "", "float", "d", "", _g, needs=("a",))])
    with pytest.raises(ValueError, match="needs 't', a column of the table"):
        Registry([Column("r", "", "float", "d", "", _f, needs=("t",)),
                  Column("t", "", "float", "d", "", _g, scope="table")])
    with pytest.raises(ValueError, match="declared twice"):
        Registry([Column("a", "", "float", "d", "", _f), Column("a", "", "float", "d", "", _g)])


def test_a_function_that_fills_several_columns_returns_only_its_own():
    comp = Compute(_f, ("x", "y"), (), "table")
    assert comp.values({"x": 1}) == {"x": 1, "y": None}
    with pytest.raises(ValueError, match="not among its columns"):
        comp.values({"x": 1, "z": 2})


def test_summary_csv_keeps_its_columns_and_their_order():
    # a summary.csv written before the registry (a real demo's): its columns, in order, then the new ones
    header = next(csv.reader((FIX / "demo-summary.csv").open()))
    assert SUMMARY_COLUMNS[:len(header)] == header
    assert SUMMARY_COLUMNS[len(header):] == ["decode_step_speedup", "sampling", "lossless_verdict",
                                             "divergence_rate", "control_divergence_rate",
                                             "max_divergence_margin", "lossless_detail", "spec_source",
                                             "synthetic_suites"]
    # the verdict's function fills exactly the verdict columns
    assert [c.name for c in COLUMNS.columns if c.compute is summary_table.verdict] == verdicts.VERDICT_COLUMNS
    # every records-scope function runs before every table-scope one, each after what it needs
    done: set[str] = set()
    scopes = [c.scope for c in COLUMNS.computes]
    assert scopes == sorted(scopes, key=["records", "table"].index)
    for comp in COLUMNS.computes:
        assert set(comp.needs) <= done, comp.fn.__name__
        done |= set(comp.fills)
    assert done == set(SUMMARY_COLUMNS)


def _of_kind(kind: str, value) -> bool:
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return True  # a missing cell fits every kind
    if kind == "bool":
        return isinstance(value, bool | np.bool_)
    if kind == "str":
        return isinstance(value, str)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return kind == "float" or float(value).is_integer()


def test_every_cell_of_a_real_summary_is_of_its_columns_declared_kind(tune_dir):
    from harness.analysis.summary import summarise_dir

    for df in (pd.read_csv(FIX / "demo-summary.csv"), summarise_dir(tune_dir / "cost")):
        for name in df.columns:
            kind = COLUMNS[name].kind
            wrong = [v for v in df[name] if not _of_kind(kind, v)]
            assert not wrong, (name, kind, wrong[:3])
    assert not _of_kind("int", 2.5) and not _of_kind("bool", "True") and not _of_kind("float", True)


# ------------------------------------------------------------------------------------------ the tables
def test_the_tables_take_their_columns_headers_and_formats_from_the_registry(monkeypatch):
    shown = [c for c in COLUMNS.shown() if c.shown and not c.shown.across_engines]
    assert report.TABLE_COLUMNS == [(c.name, c.shown.header, c.shown.fmt) for c in shown]
    demo = pd.read_csv(FIX / "demo-summary.csv")
    wide = report.render_table(demo, wide=True).splitlines()
    assert re.split(r"\s{2,}", wide[1].strip()) == [c.shown.header for c in shown] + ["note"]
    # one registry field puts a column in the tables: the new column, shown, appears in --wide at its place
    entry = COLUMNS["decode_step_speedup"]
    shown_entry = dataclasses.replace(entry, shown=Shown(125, "step speedup", "{:.2f}x"))
    registry = Registry([shown_entry if c is entry else c for c in COLUMNS.columns])
    monkeypatch.setattr(report, "COLUMNS", registry)
    headers = [h for _, h, _ in report.table_columns(demo, wide=True)]
    assert headers[headers.index("speedup") + 1] == "step speedup"
    assert "step speedup" not in [h for _, h, _ in report.table_columns(demo)]  # not a default column


def test_the_tui_results_table_reads_the_registry():
    from harness.tui.screens import results

    assert results.TABLE_COLUMNS is summary_columns.TABLE_COLUMNS


# ------------------------------------------------------------------------------------------ docs/metrics.md
def _doc_block(text: str) -> list[str]:
    body = text.split(summary_columns.DOCS_BEGIN, 1)[1].split(summary_columns.DOCS_END, 1)[0]
    return body.strip("\n").splitlines()


def test_docs_column_table_is_the_registrys():
    text = METRICS.read_text(encoding="utf-8")
    assert _doc_block(text) == docs_table(COLUMNS)
    assert summary_columns.with_docs_table(text) == text
    # the generator sees a changed definition: the docs then disagree with the registry
    changed = text.replace("| requests that failed |", "| requests that went wrong |")
    assert _doc_block(changed) != docs_table(COLUMNS)
    assert summary_columns.with_docs_table(changed) == text


def test_every_column_the_docs_prose_tables_name_is_a_registry_column():
    text = METRICS.read_text(encoding="utf-8")
    prose = text.replace("\n".join(_doc_block(text)), "")
    names, in_table = set(), False
    for line in prose.splitlines():
        if line.startswith("| column |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            names |= set(re.findall(r"`([a-z_0-9]+)`", line.split("|")[1]))
    assert len(names) > 20 and names <= set(SUMMARY_COLUMNS), names - set(SUMMARY_COLUMNS)


# ---------------------------------------------------------------------------------------- decode-step speedup
@pytest.fixture(scope="module")
def tune_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "sglang-0.5.15.post1" / "tune", tmp_path_factory.mktemp("h200") / "tune")


def test_decode_step_speedup_on_the_h200_tune_is_the_tunes_prediction_from_its_own_step_costs(tune_dir):
    """The tune's step-cost phases (real SGLang 0.5.15.post1, steps 1/3/5 at c1 and c8): the summary's new
    column is accept_len x decode step / verify step, with the very step costs the tune measured (its
    tune-as-run.csv), and it predicts the phases' measured decode tok/s ratio within 10 % (the tune's own
    bar)."""
    from harness.analysis.summary import summarise_dir

    cost = summarise_dir(tune_dir / "cost").set_index(["variant", "concurrency"])
    assert cost.loc[("baseline", 1), "decode_step_speedup"] is None  # a baseline has no verify step
    tune = pd.read_csv(tune_dir / "tune-as-run.csv")
    rows = tune[tune["status"] == "step-measured"]
    assert len(rows) == 4
    for r in rows.itertuples():
        row = cost.loc[(r.variant, r.concurrency)]
        assert row["break_even_batch"] == r.concurrency
        assert row["verify_step_ms"] == pytest.approx(r.step_ms, rel=1e-9)  # the tune's own step costs
        assert row["decode_step_ms"] == pytest.approx(r.base_step_ms, rel=1e-9)
        by_hand = row["accept_len"] * row["decode_step_ms"] / row["verify_step_ms"]
        assert row["decode_step_speedup"] == pytest.approx(by_hand, rel=1e-12)
        # the tune predicted with the wide run's accept length; with the phase's own it is the new column
        assert row["decode_step_speedup"] == pytest.approx(r.speedup_pred * r.accept_len_measured
                                                           / r.accept_len_pred, rel=1e-6)
        measured = row["decode_tok_s"] / cost.loc[("baseline", r.concurrency), "decode_tok_s"]
        assert abs(row["decode_step_speedup"] / measured - 1) < 0.10, (r.variant, r.concurrency)
    spec = cost[cost["algorithm"].astype(bool)]
    assert spec["decode_step_speedup"].notna().all() and (cost["decode_step_speedup"].notna() == cost[
        "verify_step_ms"].notna()).all()
    assert predicted_speedup(2.0, 4.0, 3.0) == summary_table.decode_step_speedup(
        pd.Series({"accept_len": 2.0, "verify_step_ms": 4.0, "decode_step_ms": 3.0}), None)


# ---------------------------------------------------------------------------------------- bools, parsed once
def _edit(path: Path, edit) -> None:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    edit(rows)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        w.writerows(rows)


def test_true_false_cells_are_parsed_as_read_and_compared_as_bools(tmp_path):
    from harness.analysis.summary import read_tables, summarise_dir

    d = unpacked(FIX / "sglang-0.5.15.post1" / "tune" / "cost", tmp_path / "cost")
    before = summarise_dir(d).set_index(["variant", "concurrency"])
    requests, phases, windows = read_tables(d, ("requests.csv", "phases.csv", "server_windows.csv"))
    assert str(requests["ok"].dtype) == "boolean" and bool(requests["ok"].all())
    assert str(phases["flush_ok"].dtype) == "boolean" and str(windows["cuda_graph"].dtype) == "boolean"
    key = ("s3-k1-d4-g", 1)
    phase = str(phases[(phases["variant"] == key[0]) & (phases["concurrency"] == key[1])]["phase"].iloc[0])

    def requests_edit(rows):  # one request's ok cell left empty, another's not a bool: neither is ok
        mine = [r for r in rows if (r["variant"], r["phase"]) == (key[0], phase)]
        mine[0]["ok"], mine[1]["ok"] = "", "yes"

    def phases_edit(rows):
        next(r for r in rows if (r["variant"], r["phase"]) == (key[0], phase))["flush_ok"] = "False"

    def windows_edit(rows):
        next(r for r in rows if (r["variant"], r["phase"], r["kind"]) == (key[0], phase, "decode"))[
            "cuda_graph"] = "False"

    _edit(d / "requests.csv", requests_edit)
    _edit(d / "phases.csv", phases_edit)
    _edit(d / "server_windows.csv", windows_edit)
    after = summarise_dir(d).set_index(["variant", "concurrency"])
    assert after.loc[key, "requests"] == before.loc[key, "requests"] - 2
    assert after.loc[key, "errors"] == before.loc[key, "errors"] + 2
    assert (before.loc[key, "flush_failed"], after.loc[key, "flush_failed"]) == (0, 1)
    assert after.loc[key, "cuda_graph_false_windows"] == before.loc[key, "cuda_graph_false_windows"] + 1
    assert pd.isna(after.loc[key, "accept_len_server"])  # the flush-failed phase's counter is left out
    others = [k for k in before.index if k != key]
    pd.testing.assert_frame_equal(after.loc[others, ["requests", "errors", "flush_failed"]],
                                  before.loc[others, ["requests", "errors", "flush_failed"]])
