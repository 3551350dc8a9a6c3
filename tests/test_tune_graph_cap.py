"""A crossover search (`tune --concurrency auto`) says before it spends its budget when its ladder goes above
the batches the servers capture CUDA graphs for (on the H200 the plan's --cuda-graph-max-bs-decode 16 made
c32 and c64 eager step costs, which only the report said, after 783 s). The tune's preflight judges the grid
at the ladder's batches, not at the wide run's c1 alone; a tune at fixed levels below the cap says nothing."""

from __future__ import annotations

import time
from pathlib import Path

from harness.cli.demo import prepare_demo
from harness.studies.tune import TuneOptions, _Tune
from harness.studies.tune_preflight import tune_preflight


def _tune(tmp_path: Path, *, cap: int | None, auto: bool) -> _Tune:
    plan = prepare_demo(tmp_path)
    plan.server.cuda_graph_max_bs = cap
    plan.run.concurrency = [1]
    opts = TuneOptions(variant="seed-weak-eagle3", budget_s=600, steps=[1, 3], cost_tokens=48, auto=auto,
                       max_batch=64 if auto else None, concurrency=None if auto else [1, 8], mix=None,
                       load=False)
    return _Tune(plan, opts, tmp_path, None, None, time.monotonic)


async def test_a_ladder_above_the_captured_batches_is_said_before_the_search(tmp_path):
    t = _tune(tmp_path, cap=16, auto=True)
    lines = await tune_preflight(t, None)
    assert len(lines) == 1, lines
    line = lines[0]
    assert "captures CUDA graphs up to batch 16; the run sends up to 64" in line
    names = line[line.index("(") + 1: line.index(")")].split(", ")
    assert "baseline" in names and all(n.endswith("-g") for n in names if n != "baseline")
    assert "set server.cuda_graph_max_bs to 64" in line
    assert t.state.preflight_done and not t.state.rejected


async def test_nothing_is_said_when_the_servers_capture_the_ladder_or_the_levels_stay_below(tmp_path):
    assert await tune_preflight(_tune(tmp_path / "a", cap=64, auto=True), None) == []
    assert await tune_preflight(_tune(tmp_path / "b", cap=16, auto=False), None) == []
