"""Regeneration through the real sglang-router (the Rust router from the `sglang-router` package) in
front of two stand-in servers started by draftbench (harness.retrain.router): every row exactly once,
both workers used, a crash resumed without duplicates, nothing left running."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import subprocess

import pytest

from harness.common.errors import InputError
from harness.retrain.regen import regen
from harness.retrain.router import router_argv, worker_envs
from tests.retrain_helpers import conversation, read_jsonl, write_jsonl, write_plan
from tests.test_retrain_regen import check_exactly_once, check_regenerated

NO_ROUTER = importlib.util.find_spec("sglang_router") is None
needs_router = pytest.mark.skipif(NO_ROUTER,
                                  reason="sglang-router not installed (pip install 'draftbench[router]')")


def test_each_worker_gets_its_own_gpus():
    envs = worker_envs({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "X": "1"}, 4, 2, simulated=False)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3", "4,5", "6,7"]
    assert all(e["X"] == "1" for e in envs)
    with pytest.raises(InputError, match="need 6 GPUs; CUDA_VISIBLE_DEVICES lists 4"):
        worker_envs({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 3, 2, simulated=False)
    with pytest.raises(InputError, match="need their GPUs named"):
        worker_envs({}, 2, 1, simulated=False)
    assert worker_envs({}, 2, 1, simulated=True) == [{}, {}]  # the stand-in needs no GPU
    # small servers may share a GPU when their memory fractions say they fit
    shared = worker_envs({"CUDA_VISIBLE_DEVICES": "0"}, 2, 1, simulated=False, mem_fraction=0.3)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in shared] == ["0", "0"]
    assert [e["CUDA_VISIBLE_DEVICES"]
            for e in worker_envs({"CUDA_VISIBLE_DEVICES": "0,1"}, 4, 1, simulated=False,
                                                          mem_fraction=0.4)] == ["0", "1", "0", "1"]
    with pytest.raises(InputError, match="so that 3 servers fit on one GPU"):
        worker_envs({"CUDA_VISIBLE_DEVICES": "0"}, 3, 1, simulated=False, mem_fraction=0.35)


def test_router_command_is_an_argv_list():
    argv = router_argv("python3", "127.0.0.1", 30000, ["http://127.0.0.1:1", "http://127.0.0.1:2"],
                       metrics_port=30001)
    assert argv[argv.index("--prometheus-port") + 1] == "30001"
    assert argv[:3] == ["python3", "-m", "sglang_router.launch_router"]
    assert argv[argv.index("--worker-urls") + 1:] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


def _live(pgids: set[int]) -> set[int]:
    ps = subprocess.run(["ps", "-A", "-o", "pgid=", "-o", "stat="], capture_output=True, text=True).stdout
    return {int(p.split()[0])
            for p in ps.splitlines() if p.split() and not p.split()[1].startswith("Z")} & pgids


@needs_router
@pytest.mark.slow
async def test_regen_through_the_router_over_two_workers_resumes_without_duplicates(tmp_path):
    plan, _ = write_plan(tmp_path)
    rows = [conversation(i, turns=1 + i % 2) for i in range(24)]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    results = tmp_path / "results"

    # first run: stopped (as by Ctrl-C) after 6 rows
    seen = []
    async with contextlib.aclosing(regen(plan, inp, out, concurrency=4, workers=2, max_tokens=16,
                                         results_dir=results)) as events:
        async for p in events:
            seen.append(p)
            if p.ok >= 6:
                break
    assert any(p.state == "server-ready" and "router" in p.detail for p in seen)
    first = len(read_jsonl(out))
    assert 6 <= first < len(rows)

    # second run: the rest, through a new router and new workers
    last = None
    async for p in regen(plan, inp, out, concurrency=4, workers=2, max_tokens=16, results_dir=results):
        last = p
    assert last.state == "done" and last.already == first
    ok, bad = check_exactly_once(inp, out)
    assert not bad and len(ok) == len(rows)
    by_id = {r["id"]: r for r in rows}
    for row in ok:
        check_regenerated(by_id[row["id"]], row)
    # both workers answered; together exactly the requests of this run (one per user turn)
    answered = [int(w.split(": ")[1].split(" ")[0]) for w in last.workers]
    assert len(answered) == 2 and min(answered) > 0
    remaining = [r for r in rows if r["id"] not in {x["id"] for x in read_jsonl(out)[:first]}]
    assert sum(answered) == sum(1 + i % 2 for i, r in enumerate(rows) if r in remaining)

    # every server and router this started is stopped
    entries = [json.loads(x) for d in (results / "regen").iterdir()
               for x in (d / "servers.jsonl").read_text().splitlines()]
    started = {e["pgid"] for e in entries if e["state"] == "started"}
    assert {e["variant"] for e in entries if e["state"] == "started"} \
        == {"router", "baseline-w0", "baseline-w1"}
    assert len(started) == 6 and not _live(started)
    assert {e["pgid"] for e in entries if e["state"] == "stopped"} == started


@needs_router
@pytest.mark.slow
async def test_a_router_that_cannot_start_fails_clearly_and_stops_the_workers(tmp_path, monkeypatch):
    from harness.retrain import router

    plan, _ = write_plan(tmp_path)
    monkeypatch.setattr(router, "ROUTER_MODULE", "no_such_router_module")  # as when it is not installed there
    inp = write_jsonl(tmp_path / "in.jsonl", [conversation(0)])
    with pytest.raises(Exception, match="router"):
        async for _ in regen(plan, inp, tmp_path / "out.jsonl", workers=2, results_dir=tmp_path / "results"):
            pass
    entries = [json.loads(x) for d in (tmp_path / "results" / "regen").iterdir()
               for x in (d / "servers.jsonl").read_text().splitlines()]
    workers = {e["pgid"] for e in entries if e["state"] == "started" and e["variant"] != "router"}
    assert len(workers) == 2
    await asyncio.sleep(0)
    assert not _live(workers)
