"""Forced-acceptance rows (breakeven's `...-al3.5` copies) never count as a drafter's results: labelled FORCED
wherever they appear (CLI table, TUI Results, Retrain's drafter runs) and left out of every "best", every
drafter summary and every comparison unless asked for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from harness.analysis.alarms import AlarmTracker
from harness.analysis.compare import compare_runs
from harness.analysis.report import best_variant, render_table
from harness.analysis.runs import list_drafters, list_runs, load_run, result_rows
from tests.cli_helpers import ROOT, cli_here

WEAK = "demo-seed-weak-eagle3"


def _run(results: Path, run_id: str, rows: list[dict], metas: dict[str, dict]) -> Path:
    run = results / run_id
    run.mkdir(parents=True)
    (run / "provenance.json").write_text(json.dumps({"run_id": run_id, "status": "complete", "plan": "demo"}))
    (run / "requests.csv").write_text("variant,concurrency\n")
    base = {"requests": 5, "errors": 0, "status": "ok", "simulated": True, "baseline": False,
            "algorithm": "EAGLE3", "ttft_p50_ms": 15.0, "accept_len": None}
    pd.DataFrame([{**base, **r} for r in rows]).to_csv(run / "summary.csv", index=False)
    (run / "variants.jsonl").write_text("".join(json.dumps({"variant": v, **m}) + "\n"
                                                for v, m in metas.items()))
    return run


def two_runs(results: Path) -> tuple[Path, Path]:
    """The issue's case: the weak drafter's own run (1.98, 0.59x) and its breakeven run (al3.5: 3.51,
    1.09x)."""
    own = _run(results, "20250101-000000-demo", [
        {"variant": "baseline", "concurrency": 1, "tok_s": 82.5, "speedup": 1.0, "baseline": True,
         "algorithm": ""},
        {"variant": "seed-weak-eagle3", "concurrency": 1, "tok_s": 48.8, "accept_len": 1.98, "speedup": 0.59,
         "verdict": "slower", "slower_than_baseline": True},
    ], {"baseline": {}, "seed-weak-eagle3": {"drafter": WEAK}})
    forced = _run(results, "20250102-000000-demo-breakeven", [
        {"variant": "baseline", "concurrency": 1, "tok_s": 82.5, "speedup": 1.0, "baseline": True,
         "algorithm": ""},
        {"variant": "seed-weak-eagle3-al1.5", "concurrency": 1, "tok_s": 40.0, "accept_len": 1.52,
         "speedup": 0.48, "forced_acceptance": 1.5, "verdict": "slower", "slower_than_baseline": True},
        {"variant": "seed-weak-eagle3-al3.5", "concurrency": 1, "tok_s": 90.0, "accept_len": 3.51,
         "speedup": 1.09, "forced_acceptance": 3.5, "verdict": "faster"},
    ], {"baseline": {}, "seed-weak-eagle3-al1.5": {"drafter": WEAK, "forced_acceptance": 1.5},
        "seed-weak-eagle3-al3.5": {"drafter": WEAK, "forced_acceptance": 3.5}})
    return own, forced


def test_a_drafters_results_leave_its_forced_rows_apart(tmp_path):
    two_runs(tmp_path / "results")
    [weak] = [d
              for d in list_drafters([ROOT / "drafters"], list_runs(tmp_path / "results")) if d.name == WEAK]
    assert weak.results == (("20250101-000000-demo", "seed-weak-eagle3", 1, 1.98, 0.59),)
    assert [r[1] for r in weak.forced] == ["seed-weak-eagle3-al1.5", "seed-weak-eagle3-al3.5"]


def test_never_the_best_and_never_an_alarm(tmp_path):
    _, forced = two_runs(tmp_path / "results")
    df = load_run(forced).summary
    assert best_variant(df, 1) is None  # the only `faster` row is forced
    assert [a.variant for a in _alarms(df)] == []  # al1.5 is slower, as breakeven means it to be
    table = render_table(df)
    row = next(ln for ln in table.splitlines() if ln.startswith("seed-weak-eagle3-al3.5"))
    assert "FORCED accept len 3.5: outputs are not the model's" in row and not row.startswith("*")
    rows = {r.key.split("@")[0]: r for r in result_rows(df)}  # the TUI's Results
    assert rows["seed-weak-eagle3-al3.5"].note.startswith("FORCED accept len 3.5") and not \
        rows["seed-weak-eagle3-al3.5"].winner


def _alarms(df: pd.DataFrame):
    from harness.inputs.config import load_plan

    return AlarmTracker(load_plan(ROOT / "plans" / "demo.yaml")).compare(df)


def test_compare_leaves_them_out_unless_asked(tmp_path):
    own, forced = two_runs(tmp_path / "results")
    plain = compare_runs(load_run(own), load_run(forced)).table
    assert sorted(plain["variant"]) == ["baseline", "seed-weak-eagle3"]
    asked = compare_runs(load_run(own), load_run(forced), forced=True).table
    assert "seed-weak-eagle3-al3.5 (FORCED)" in set(asked["variant"])
    out = cli_here("compare", str(own), str(forced), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "al3.5" not in out.stdout
    out = cli_here("compare", str(own), str(forced), "--forced", cwd=tmp_path)
    assert "seed-weak-eagle3-al3.5 (FORCED)" in out.stdout


async def test_the_retrain_drafter_table_shows_the_drafters_own_best(tmp_path):
    from harness.inputs.config import load_plan
    from harness.tui.app import build_app
    from tests.snapshots.tui_fakes import wait_for

    two_runs(tmp_path / "results")
    shutil.copytree(ROOT / "drafters", tmp_path / "drafters")
    app = build_app(None, tmp_path / "results", plan=load_plan(ROOT / "plans" / "demo.yaml"),
                    section="retrain", gpu_poll_s=0, drafter_dirs=[tmp_path / "drafters"])
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: any(d.name == WEAK for d in app.drafters), "drafters listed", 30)
        table = app.screen.query_one("#drafters-table")
        await wait_for(pilot, lambda: WEAK in [k.value for k in table.rows], "weak row", 10)
        row = dict(zip([c.value for c in table.columns], table.get_row(WEAK), strict=True))
        assert (row["runs"], row["accept"], row["speedup"]) == ("1", "1.98", "0.59")
        table.move_cursor(row=[k.value for k in table.rows].index(WEAK))
        await pilot.pause()
        app.screen._show_drafter_runs()
        runs = app.screen.query_one("#drafter-runs")
        variants = [str(runs.get_row_at(i)[1]) for i in range(runs.row_count)]
        assert variants == ["seed-weak-eagle3", "seed-weak-eagle3-al1.5 (FORCED)",
                            "seed-weak-eagle3-al3.5 (FORCED)"]
