"""harness.engines.sglang.prom: the server's own TTFT / queue / e2e means over a phase, from SGLang's
histograms. Parsed on the real server's /metrics (captured before and after 21 requests on the H200), and
checked end to end against the stand-in: the server's interval lies inside the client's, request by request
and so in mean."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.engines.sglang.prom import COLUMNS, histogram_totals, phase_means
from harness.inputs.config import load_plan
from tests.faults_helpers import GOOD, SIM_LAUNCHER, only_run_dir, prompts, read_csv, sim_env, write_plan

REAL = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"


def _scrapes(name: str) -> tuple[str, str]:
    text = (REAL / f"metrics-{name}.txt").read_text()
    before, after = text.split("### after\n")
    return before, after


def _value(text: str, series: str) -> float:
    """One series' value, read with a regex independent of the parser (one label set in these captures)."""
    found = re.findall(rf"^{re.escape(series)}\{{[^}}]*\}} (\S+)$", text, flags=re.M)
    assert len(found) == 1, series
    return float(found[0])


@pytest.mark.parametrize("name", ["baseline", "eagle3"])
def test_real_scrapes_give_the_phase_means(name: str) -> None:
    before, after = _scrapes(name)
    t0, t1 = histogram_totals(before), histogram_totals(after)
    for base in ("sglang:time_to_first_token_seconds", "sglang:queue_time_seconds",
                 "sglang:e2e_request_latency_seconds"):
        assert t1[base] == (_value(after, base + "_sum"), _value(after, base + "_count"))
        assert t0[base] == (_value(before, base + "_sum"), _value(before, base + "_count"))
    row = phase_means(t0, t1)
    n = _value(after, "sglang:e2e_request_latency_seconds_count") - _value(
        before, "sglang:e2e_request_latency_seconds_count")
    assert row["server_requests"] == n > 0
    ttft = (_value(after, "sglang:time_to_first_token_seconds_sum")
            - _value(before, "sglang:time_to_first_token_seconds_sum")) / n * 1000
    assert row["server_ttft_ms_mean"] == pytest.approx(ttft, abs=1e-3)
    assert 0 < row["server_queue_ms_mean"] < row["server_ttft_ms_mean"] < row["server_e2e_ms_mean"]


def test_label_sets_are_summed_and_other_series_ignored() -> None:
    _, after = _scrapes("baseline")
    line = next(ln for ln in after.splitlines() if ln.startswith("sglang:queue_time_seconds_count{"))
    rank1 = line.replace('tp_rank="0"', 'tp_rank="1"')
    lines = after.splitlines()
    totals = histogram_totals("\n".join([*lines, rank1]))
    single = histogram_totals(after)
    q_sum, q_count = single["sglang:queue_time_seconds"]
    assert totals["sglang:queue_time_seconds"] == (q_sum, 2 * q_count)
    assert set(totals) == set(single) == {"sglang:time_to_first_token_seconds", "sglang:queue_time_seconds",
                                          "sglang:e2e_request_latency_seconds"}


def test_missing_scrapes_histograms_and_idle_phases_give_none() -> None:
    before, after = (histogram_totals(t) for t in _scrapes("baseline"))
    assert phase_means(None, after) == dict.fromkeys(COLUMNS)
    assert phase_means(before, None) == dict.fromkeys(COLUMNS)
    idle = phase_means(after, after)  # nothing finished in between
    assert idle["server_requests"] == 0 and idle["server_ttft_ms_mean"] is None
    no_queue = {k: v for k, v in after.items() if k != "sglang:queue_time_seconds"}
    row = phase_means(before, no_queue)
    assert row["server_queue_ms_mean"] is None and row["server_ttft_ms_mean"] is not None
    assert histogram_totals("not prometheus\nsglang:broken_sum\n# HELP x\n") == {}


@pytest.mark.slow
async def test_a_run_records_the_servers_own_ttft_inside_the_clients(tmp_path: Path) -> None:
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.3), variants=[{"name": "baseline"}, GOOD], suite_prompts=prompts(6),
                           run={"concurrency": [1, 3], "max_tokens": 24})
    assert await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results"),
                         out=io.StringIO()) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    requests = read_csv(run_dir / "requests.csv")
    for phase in read_csv(run_dir / "phases.csv"):
        mine = [float(r["ttft_ms"]) for r in requests
                if (r["variant"], r["phase"]) == (phase["variant"], phase["phase"])]
        assert float(phase["server_requests"]) == len(mine) == int(phase["requests"]) == 6
        server = float(phase["server_ttft_ms_mean"])
        assert 0 < server <= sum(mine) / len(mine)
        assert 0 <= float(phase["server_queue_ms_mean"]) < server < float(phase["server_e2e_ms_mean"])
    summary = read_csv(run_dir / "summary.csv")
    assert all(0 < float(s["server_ttft_mean_ms"]) <= float(s["ttft_mean_ms"]) for s in summary)
