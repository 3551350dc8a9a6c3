"""Server faults, end to end through the runner: a server SIGKILLed mid-suite, per-request misbehaviour
(HTTP 500, malformed SSE, reset, hang) from tests/faulty_server.py, and a server that never gets healthy."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common import events as ev
from harness.inputs.config import load_plan
from tests.faults_helpers import (
    FAULTY_LAUNCHER,
    GOOD,
    SIM_LAUNCHER,
    last_variant_meta,
    live_groups,
    prompts,
    read_csv,
    reap_servers,
    request_keys,
    sim_env,
    started_pgids,
    write_plan,
)

pytestmark = pytest.mark.slow

REQUEST_TIMEOUT_S = 120.0


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


async def test_server_killed_mid_suite_fails_only_that_variant(tmp_path: Path, capsys):
    n = 8
    plan_path = write_plan(
        tmp_path / "plan.yaml",
        workdir=tmp_path / "work",
        launcher=SIM_LAUNCHER,
        env=sim_env(0.5),
        variants=[{"name": "baseline"}, GOOD],
        suite_prompts=prompts(n),
        run={"concurrency": [2], "max_tokens": 48, "request_timeout_s": REQUEST_TIMEOUT_S},
    )
    plan = load_plan(plan_path)
    seen: list[object] = []
    pgid: dict[str, int] = {}

    async def kill_on_first_result():
        killed = False
        async for e in run_plan(plan, results_dir=tmp_path / "results"):
            seen.append(e)
            if isinstance(e, ev.ServerState) and e.state == "ready":
                pgid[e.variant] = e.pgid
            if isinstance(e, ev.RequestDone) and e.record.variant == "baseline" and not killed:
                os.killpg(pgid["baseline"], signal.SIGKILL)  # mid-phase: more requests in flight and queued
                killed = True
            yield e

    # Detection must not wait for the in-flight requests' timeout: the whole run gets less than half of it.
    rc = await asyncio.wait_for(consume(kill_on_first_result(), out=io.StringIO()), REQUEST_TIMEOUT_S / 2)
    assert rc == 1
    run_dir = Path(next(e.run_dir for e in seen if isinstance(e, ev.RunStarted)))

    meta = last_variant_meta(run_dir)
    assert meta["baseline"]["status"] == "failed"
    assert meta["baseline"]["failure"] == "died during the suite"
    last_lines = meta["baseline"]["last_log_lines"]
    assert 0 < len(last_lines) <= 50
    # split on "\n" only: the start-up progress bars carry "\r" inside their lines
    log_lines = (run_dir / "logs" / "baseline.log").read_bytes().decode().split("\n")
    assert all(line in log_lines for line in last_lines)
    assert meta["good"]["status"] == "ok"
    failed = [e for e in seen if isinstance(e, ev.ServerState) and e.state == "failed"]
    assert [e.variant for e in failed] == ["baseline"] and failed[0].detail.split("\n") == last_lines

    rows = read_csv(run_dir / "requests.csv")
    keys = request_keys(rows)
    assert len(keys) == len(set(keys))
    good = [r for r in rows if r["variant"] == "good"]
    assert len(good) == n and all(r["ok"] == "True" for r in good)
    base = [r for r in rows if r["variant"] == "baseline"]
    base_errors = [r for r in base if r["ok"] != "True"]
    # only requests in flight at the kill fail; the queued ones are not sent to a dead server
    assert 1 <= len(base_errors) <= 2 and len(base) < n
    assert all(r["error"] for r in base_errors)

    summary = {r["variant"]: r for r in read_csv(run_dir / "summary.csv")}
    assert summary["baseline"]["status"] == "failed"
    assert summary["good"]["status"] == "ok" and int(summary["good"]["requests"]) == n
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "incomplete"
    err = capsys.readouterr().err
    assert "[baseline] server failed" in err and "[baseline] FAILED: server died during the suite" in err
    assert started_pgids(run_dir) == {"baseline": [pgid["baseline"]], "good": [pgid["good"]]}
    assert not set(pgid.values()) & live_groups()


# What each fault ends as, with `retries` re-sends: (ok, error prefix, http status, attempts).
def expected(fault: str, retries: int) -> tuple[bool, str, str, int]:
    once = retries >= 1
    return {
        "": (True, "", "200", 1),
        "FAIL_ONCE": (once, "" if once else "http 500", "200" if once else "500", min(2, retries + 1)),
        "RESET_ONCE": (once, "" if once else "connection reset", "200", min(2, retries + 1)),
        "FAIL_ALWAYS": (False, "http 500: ", "500", retries + 1),
        "MALFORMED": (False, "malformed sse: ", "200", retries + 1),
        "RESET": (False, "connection reset", "200", retries + 1),
        "HANG": (False, "timeout", "200", retries + 1),
    }[fault]


FAULT_PROMPTS = [
    ("ok1", ""),
    ("ok2", ""),
    ("f1", "FAIL_ONCE"),
    ("f2", "FAIL_ALWAYS"),
    ("f3", "MALFORMED"),
    ("f4", "RESET"),
    ("f5", "RESET_ONCE"),
    ("f6", "HANG"),
]


@pytest.mark.parametrize("retries", [0, 2])
async def test_misbehaving_server_is_recorded_per_request(tmp_path: Path, retries: int):
    max_tokens = 8
    suite = [{"id": pid, "text": f"{fault or 'fine'} request {pid}"} for pid, fault in FAULT_PROMPTS]
    plan_path = write_plan(
        tmp_path / "plan.yaml",
        workdir=tmp_path / "work",
        launcher=FAULTY_LAUNCHER,
        sim=False,
        variants=[{"name": "baseline"}],
        suite_prompts=suite,
        run={"concurrency": [4], "max_tokens": max_tokens, "request_timeout_s": 1.0, "retries": retries},
    )
    rc = await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results"), out=io.StringIO())
    assert rc == 1  # request errors
    run_dir = next((tmp_path / "results").iterdir())

    rows = {r["prompt_id"]: r for r in read_csv(run_dir / "requests.csv")}
    assert len(read_csv(run_dir / "requests.csv")) == len(FAULT_PROMPTS) == len(rows)
    server_log = (run_dir / "logs" / "baseline.log").read_text()
    received = Counter(re.findall(r"chat attempt \d+: (\S+ request \S+)", server_log))
    for pid, fault in FAULT_PROMPTS:
        ok, error, status, attempts = expected(fault, retries)
        r = rows[pid]
        assert (r["ok"] == "True", r["http_status"], int(r["attempts"])) == (ok, status, attempts), (pid, r)
        assert r["error"].startswith(error) and bool(r["error"]) != ok, (pid, r["error"])
        assert received[f"{fault or 'fine'} request {pid}"] == attempts  # retries are bounded, really sent
        # tokens of the final attempt only: a retried stream that had sent half its tokens counts once
        assert r["output_tokens"] == (str(max_tokens) if ok else ""), (pid, r["output_tokens"])

    n_ok = sum(expected(f, retries)[0] for _, f in FAULT_PROMPTS)
    phase = read_csv(run_dir / "phases.csv")
    assert [(int(p["requests"]), int(p["errors"]), int(p["output_tokens"])) for p in phase] == [
        (n_ok, len(FAULT_PROMPTS) - n_ok, n_ok * max_tokens)
    ]
    (summary,) = read_csv(run_dir / "summary.csv")
    assert (int(summary["requests"]), int(summary["errors"])) == (n_ok, len(FAULT_PROMPTS) - n_ok)
    assert int(summary["output_tokens"]) == n_ok * max_tokens and summary["status"] == "ok"


async def test_never_healthy_server_fails_its_variant_and_the_others_run(tmp_path: Path, capsys):
    n = 3
    variants = [
        {"name": "baseline"},
        {"name": "stuck", "baseline": False, "extra_args": ["--never-healthy"]},
        {"name": "after", "baseline": False},
    ]
    plan_path = write_plan(
        tmp_path / "plan.yaml",
        workdir=tmp_path / "work",
        launcher=FAULTY_LAUNCHER,
        sim=False,
        variants=variants,
        suite_prompts=prompts(n),
        server={"startup_timeout_s": 5},  # the healthy ones start in well under a second
        run={"concurrency": [2], "max_tokens": 8},
    )
    seen: list[object] = []

    async def record():
        async for e in run_plan(load_plan(plan_path), results_dir=tmp_path / "results"):
            seen.append(e)
            yield e

    assert await consume(record(), out=io.StringIO()) == 1
    run_dir = next((tmp_path / "results").iterdir())
    meta = last_variant_meta(run_dir)
    assert meta["stuck"]["status"] == "failed"
    assert meta["stuck"]["failure"] == "did not become healthy within 5 s"
    assert any("(never healthy)" in line for line in meta["stuck"]["last_log_lines"])
    assert meta["baseline"]["status"] == meta["after"]["status"] == "ok"
    order = [e.variant for e in seen if isinstance(e, ev.VariantDone)]
    assert order == ["baseline", "stuck", "after"]

    rows = read_csv(run_dir / "requests.csv")
    assert Counter(r["variant"] for r in rows) == {"baseline": n, "after": n}
    assert all(r["ok"] == "True" for r in rows)
    summary = {r["variant"]: r["status"] for r in read_csv(run_dir / "summary.csv")}
    assert summary == {"baseline": "ok", "stuck": "failed", "after": "ok"}
    assert "[stuck] FAILED: server did not become healthy within 5 s" in capsys.readouterr().err
    assert not {p for ps in started_pgids(run_dir).values() for p in ps} & live_groups()
