"""Servers draftbench did not start (`endpoint:`) and API keys (`api_key_env`): stand-ins started by the test,
measured, checked against their own /get_server_info, and never stopped; keys only from the environment."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common.errors import HarnessError
from harness.inputs.config import load_plan
from tests.faults_helpers import (
    SIM_LAUNCHER,
    only_run_dir,
    prompts,
    read_csv,
    reap_servers,
    sim_env,
    write_plan,
)
from tests.workload_helpers import _status, spec_flags, start_stand_in, stop_stand_in, write_models

KEY = "sk-endpoint-test-0123456789abcdef"


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = write_models(tmp_path_factory.mktemp("endpoints"))
    base = start_stand_in(root, "baseline")
    spec = start_stand_in(root, "eagle3", *spec_flags(root), "--api-key", KEY)
    yield base, spec
    stop_stand_in(base)
    stop_stand_in(spec)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _plan(tmp_path: Path, base, spec, **spec_variant):
    variants = [{"name": "baseline", "endpoint": base.url},
                {"name": "eagle3", "endpoint": spec.url, "baseline": False, "api_key_env": "DB_TEST_KEY",
                 **spec_variant}]
    path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER, env=sim_env(),
                      variants=variants, suite_prompts=prompts(3), run={"concurrency": [2], "max_tokens": 8,
                                                                        "repeats": 1})
    return load_plan(path)


async def _run(tmp_path: Path, plan) -> tuple[int, Path]:
    rc = await consume(run_plan(plan, results_dir=tmp_path / "results"), out=io.StringIO())
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    return rc, run_dir


def _variants(run_dir: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in (run_dir / "variants.jsonl").read_text().splitlines() if x.strip()]
    return {r["variant"]: r for r in rows}


@pytest.mark.slow
async def test_existing_endpoints_are_measured_and_never_stopped(tmp_path, stand_ins, monkeypatch, capsys):
    base, spec = stand_ins
    monkeypatch.setenv("DB_TEST_KEY", KEY)
    rc, run_dir = await _run(tmp_path, _plan(tmp_path, base, spec))
    assert rc == 0
    rows = read_csv(run_dir / "requests.csv")
    assert len(rows) == 6 and all(r["ok"] == "True" for r in rows)
    meta = _variants(run_dir)
    assert meta["eagle3"]["started_by_draftbench"] is False and meta["eagle3"]["endpoint"] == spec.url
    # the spec arm's settings come from the server, not the plan (which named none)
    assert (meta["eagle3"]["algorithm"], meta["eagle3"]["num_steps"], meta["eagle3"]["eagle_topk"],
            meta["eagle3"]["num_draft_tokens"]) == ("EAGLE3", 3, 1, 4)
    assert meta["baseline"]["algorithm"] == "" and meta["baseline"]["status"] == "ok"
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["servers_not_started"] == ["baseline", "eagle3"]
    assert base.proc.poll() is None and spec.proc.poll() is None  # both still up
    # the progress lines: the printout says whose servers these are, not "kept" as if draftbench kept them
    printed = capsys.readouterr().err
    assert f"[eagle3] server starting: connecting to {spec.url}" in printed
    assert "[eagle3] server ready port" in printed and "(an endpoint draftbench did not start)" in printed
    assert "[baseline] server kept: left running, draftbench did not start it" in printed
    assert "pgid None" not in printed
    assert _status(base.url + "/health") == 200
    summary = {r["variant"]: r for r in read_csv(run_dir / "summary.csv")}
    assert float(summary["eagle3"]["output_match"]) == 1.0 and float(summary["eagle3"]["accept_len"]) > 1
    for path in run_dir.rglob("*"):  # the key was sent on every call and written nowhere
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
async def test_a_plan_that_does_not_match_the_server_fails_that_variant(tmp_path, stand_ins, monkeypatch):
    base, spec = stand_ins
    monkeypatch.setenv("DB_TEST_KEY", KEY)
    rc, run_dir = await _run(tmp_path, _plan(tmp_path, base, spec, algorithm="EAGLE3", num_steps=5,
                                             eagle_topk=1, num_draft_tokens=6))
    assert rc != 0
    meta = _variants(run_dir)["eagle3"]
    assert meta["status"] == "failed" and "declares num_steps 5 but the server runs 3" in meta["failure"]
    assert spec.proc.poll() is None


@pytest.mark.slow
async def test_a_wrong_key_is_a_401_error_before_the_first_request(tmp_path, stand_ins, monkeypatch):
    base, spec = stand_ins
    monkeypatch.setenv("DB_TEST_KEY", "not-the-key")
    rc, run_dir = await _run(tmp_path, _plan(tmp_path, base, spec))
    assert rc != 0
    meta = _variants(run_dir)["eagle3"]
    assert meta["status"] == "failed"
    assert "401 Unauthorized" in meta["failure"] and "api_key_env" in meta["failure"]
    assert not [r for r in read_csv(run_dir / "requests.csv") if r["variant"] == "eagle3"]
    assert not [r for r in read_csv(run_dir / "summary.csv") if r["variant"] == "eagle3" and r["tok_s"]]


async def test_a_missing_key_variable_stops_the_run_before_any_server(tmp_path, stand_ins, monkeypatch):
    base, spec = stand_ins
    monkeypatch.delenv("DB_TEST_KEY", raising=False)
    with pytest.raises(HarnessError, match="DB_TEST_KEY is not set"):
        await consume(run_plan(_plan(tmp_path, base, spec), results_dir=tmp_path / "results"),
                      out=io.StringIO())
    assert not (only_run_dir(tmp_path / "results") / "requests.csv").read_text().strip().count("\n")


@pytest.mark.slow
async def test_a_started_stand_in_gets_the_key_and_the_run_directory_never_does(tmp_path, monkeypatch):
    monkeypatch.setenv("DB_STARTED_KEY", KEY)
    path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER, env=sim_env(),
                      variants=[{"name": "baseline"}], suite_prompts=prompts(2),
                      server={"api_key_env": "DB_STARTED_KEY"}, run={"concurrency": [1], "max_tokens": 4})
    rc, run_dir = await _run(tmp_path, load_plan(path))
    assert rc == 0 and all(r["ok"] == "True" for r in read_csv(run_dir / "requests.csv"))
    remote_log = (tmp_path / "work" / "runs" / run_dir.name / "baseline.log").read_text()
    assert "401" not in remote_log  # every call (health, flush, server_info, metrics, requests) carried it
    argv = json.loads((run_dir / "servers.jsonl").read_text().splitlines()[0])["argv"]
    assert "--api-key" in argv
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
