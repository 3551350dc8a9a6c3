"""`run` (and every command that starts servers) runs the preflight first: an error stops it before any server
starts, exit 2, the check's own line and fix; `--no-check` skips it; a plan's `expect:` lets a deliberately
wrong arm run (the demo's wrong-flag-eagle)."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.bench.gate import blocking, checked_run_plan, error_line
from harness.checks import run_checks
from harness.cli.demo import load_ready_plan
from harness.common.errors import PreflightFailed
from harness.common.findings import error
from harness.targets.local import LocalTarget
from tests.cli_helpers import ROOT, busy_port_fixture, cli, cli_here, run_dirs, small_plan  # noqa: F401 (a fixture)

DEMO = ROOT / "plans" / "demo.yaml"


def test_a_busy_fixed_port_stops_the_run_before_any_server_starts(tmp_path, busy_port):
    plan = small_plan(tmp_path, port=busy_port)
    out = cli_here("run", str(plan), "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"error: {plan}: preflight: port {busy_port} ")
    assert "fix: set server.port: auto" in lines[0] and "--no-check" in lines[0]
    assert run_dirs(tmp_path / "r") == []  # no run directory: nothing started
    assert not list((tmp_path / "r" / ".demo-target").glob("*.log"))


def test_a_missing_checkpoint_stops_before_the_baseline_runs(tmp_path):
    gone = {"name": "gone", "path": str(tmp_path / "no-such-ckpt"), "algorithm": "EAGLE3"}
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(gone))
    plan = small_plan(tmp_path, drafter=str(tmp_path / "gone.yaml"))
    out = cli_here("run", str(plan), "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    first = out.stderr.strip().splitlines()[0]
    assert "variant 'good-eagle3'" in first and f"{tmp_path / 'no-such-ckpt'} does not exist" in first
    assert "fix:" in first
    assert run_dirs(tmp_path / "r") == []  # the baseline never ran


@pytest.mark.parametrize("command", [["breakeven", "--variant", "good-eagle3"], ["tune", "--budget", "60"]])
def test_breakeven_and_tune_check_first_too(tmp_path, busy_port, command):
    plan = small_plan(tmp_path, port=busy_port)
    out = cli_here(command[0], str(plan), *command[1:], "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert f"preflight: port {busy_port} " in out.stderr and "Traceback" not in out.stderr
    assert run_dirs(tmp_path / "r") == []


def test_regen_checks_the_baseline_it_starts(tmp_path, busy_port):
    plan = small_plan(tmp_path, port=busy_port)
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "conversations": [
        {"role": "user", "content": "hi"}]}) + "\n")
    out = cli_here("regen", str(plan), "--input", "in.jsonl", "--output", "out.jsonl", "--results-dir", "r",
              cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert f"preflight: port {busy_port} " in out.stderr
    assert not (tmp_path / "out.jsonl").exists() or (tmp_path / "out.jsonl").read_text() == ""


def test_no_check_starts_the_servers_anyway_and_each_failed_row_says_why(tmp_path, busy_port):
    import pandas as pd

    plan = small_plan(tmp_path, port=busy_port)
    out = cli_here("run", str(plan), "--results-dir", "r", "--no-check", cwd=tmp_path)
    assert out.returncode == 1, out.stderr  # the servers could not bind: the run finished with failures
    [run_dir] = run_dirs(tmp_path / "r")
    why = f"port {busy_port} in use (exited before it became ready)"
    summary = pd.read_csv(run_dir / "summary.csv")
    assert summary[["variant", "failure_reason"]].values.tolist() == [["baseline", why], ["good-eagle3", why]]
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith(("baseline ", "good-eagle3 "))]
    assert len(rows) == 2 and all(ln.rstrip().endswith(f"FAILED: {why}") for ln in rows)
    assert all(ln.split()[1] == "-" for ln in rows)  # no "conc 0": it never measured
    assert f"[baseline] server failed: port {busy_port} in use" in out.stderr
    assert "Capturing batches" not in out.stderr and len(out.stderr.splitlines()) < 20  # no log dump


def test_a_missing_checkpoint_with_no_check_names_it_in_its_row(tmp_path):
    import pandas as pd

    gone = {"name": "gone", "path": str(tmp_path / "no-such-ckpt"), "algorithm": "EAGLE3"}
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(gone))
    plan = small_plan(tmp_path, drafter=str(tmp_path / "gone.yaml"))
    out = cli_here("run", str(plan), "--results-dir", "r", "--no-check", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    [run_dir] = run_dirs(tmp_path / "r")
    row = pd.read_csv(run_dir / "summary.csv").set_index("variant").loc["good-eagle3"]
    assert row["failure_reason"] == \
        f"checkpoint not found: {tmp_path / 'no-such-ckpt'} (exited before it became ready)"
    assert "Traceback" not in out.stderr


async def test_the_demo_plans_wrong_arm_is_expected_and_noted(tmp_path):
    plan = load_ready_plan(DEMO, tmp_path)
    findings = await run_checks(plan, LocalTarget())
    wrong = [f for f in findings if f.variant == "wrong-flag-eagle" and f.code == "eagle3-drafter-with-eagle"]
    assert [f.severity for f in wrong] == ["info"]
    assert "expected (error, the plan says `expect: drafter-inert`)" in wrong[0].what
    assert blocking(findings) == []
    plan.variant("wrong-flag-eagle").expect = []  # the same arm undeclared: an error again
    again = await run_checks(plan, LocalTarget())
    assert [(f.variant, f.code) for f in blocking(again)] \
        == [("wrong-flag-eagle", "eagle3-drafter-with-eagle")]


def test_check_of_the_demo_plan_passes_and_says_why_the_arm_runs(tmp_path):
    out = cli_here("check", str(DEMO), "--json", "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["findings"]
    assert [f["severity"] for f in found if f["variant"] == "wrong-flag-eagle" and f["what"].startswith(
        "expected (error, the plan says `expect: drafter-inert`)")] == ["info"]


def test_an_expectation_that_names_no_finding_is_noted(tmp_path):
    import asyncio

    plan = load_ready_plan(DEMO, tmp_path)
    plan.variant("good-eagle3").expect = ["eagle2-drafter-with-eagle3"]
    findings = asyncio.run(run_checks(plan, LocalTarget()))
    unmet = [f for f in findings if f.code == "expectation-unmet"]
    assert [(f.variant, f.severity) for f in unmet] == [("good-eagle3", "info")]


def test_a_bad_expect_word_is_bad_input(tmp_path):
    plan = yaml.safe_load(DEMO.read_text())
    plan["variants"][3]["expect"] = "Drafter Inert"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = cli_here("check", str(path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "expect" in out.stderr and "'Drafter Inert'" in out.stderr


def test_blocking_keeps_plan_wide_errors_and_the_asked_variants():
    found = [error("", "port-in-use", "port 1 taken", "", "free it"), error("a", "x", "bad a", "", ""),
             error("b", "y", "bad b", "", "fix b")]
    assert [f.code for f in blocking(found, ["b"])] == ["port-in-use", "y"]
    assert error_line(found[2], "p.yaml") == "p.yaml: preflight: variant 'b': bad b; fix: fix b"


async def test_the_tuis_run_call_stops_on_a_preflight_error(tmp_path, busy_port):
    plan = load_ready_plan(small_plan(tmp_path, port=busy_port), tmp_path / "r")
    with pytest.raises(PreflightFailed) as got:
        async for _ in checked_run_plan(plan, results_dir=str(tmp_path / "r")):
            raise AssertionError("an event came before the preflight passed")
    assert f"port {busy_port}" in got.value.lines[0]
    assert run_dirs(tmp_path / "r") == []


def test_the_tuis_run_process_ends_with_the_preflight_line(tmp_path, busy_port):
    """The Run button's path: RunProcess -> runchild -> checked_run_plan; the run ends before any server."""
    import threading

    from harness.tui import messages as msg
    from harness.tui.runproc import RUN_PLAN, RunProcess

    plan = load_ready_plan(small_plan(tmp_path, port=busy_port), tmp_path / "r")
    posted: list = []
    proc = RunProcess(RUN_PLAN, (plan,), {"results_dir": str(tmp_path / "r"), "keep_servers": False},
                      post=posted.append)
    t = threading.Thread(target=proc.run)
    t.start()
    t.join(120)
    assert not t.is_alive()
    crashed = [m for m in posted if isinstance(m, msg.RunCrashed)]
    assert len(crashed) == 1 and crashed[0].error.startswith(f"preflight: port {busy_port} ")
    assert "Traceback" not in crashed[0].error and crashed[0].run_dir is None
    assert not [m for m in posted if isinstance(m, msg.ServerStateChanged)]  # no server started
    assert run_dirs(tmp_path / "r") == []


async def test_a_resumed_runs_own_server_on_the_port_is_no_reason_to_refuse(tmp_path, busy_port):
    from harness.bench.gate import require_preflight

    plan = load_ready_plan(small_plan(tmp_path, port=busy_port), tmp_path / "r")
    run = tmp_path / "r" / "20250101-000000-demo"
    run.mkdir(parents=True)
    (run / "servers.jsonl").write_text(json.dumps({"variant": "baseline", "pgid": 4242, "port": busy_port,
                                                   "state": "started"}) + "\n")
    await require_preflight(plan, resume_dir=run)  # the resumed run stops its leftover first
    (run / "servers.jsonl").write_text((run / "servers.jsonl").read_text() + json.dumps(
        {"variant": "baseline", "pgid": 4242, "state": "stopped"}) + "\n")
    with pytest.raises(PreflightFailed):  # stopped: whatever holds the port now is not the run's
        await require_preflight(plan, resume_dir=run)


def test_the_demo_says_why_its_wrong_arm_runs(tmp_path):
    """Through `run` of the demo plan cut to baseline + wrong-flag-eagle: the note, then the run."""
    plan = yaml.safe_load(DEMO.read_text())
    plan["target"]["workdir"] = str(tmp_path / "nowhere")
    plan["variants"] = [v for v in plan["variants"] if v["name"] in ("baseline", "wrong-flag-eagle")]
    plan["run"].update(concurrency=[1], max_tokens=16, warmup_requests=0)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    out = cli_here("run", str(tmp_path / "p.yaml"), "--results-dir", "r", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith("note: variant 'wrong-flag-eagle' runs as the plan expects: expected (error, the "
                            "plan says `expect: drafter-inert`): EAGLE-3 drafter")
    assert "[wrong-flag-eagle] server ready" in out.stderr


async def test_servers_draftbench_did_not_start_pass_the_gate_without_a_drafter(tmp_path):
    """An `endpoint:` arm names the algorithm it expects and no drafter (the server already has one): the
    gate has no argv of ours to judge there, so `EAGLE3 without a drafter` must not stop the run (it stopped
    decide.sh's serve stage, whose endpoints plan is exactly this). Its settings are checked against the
    server's /get_server_info when the run connects (tests/test_endpoints_run.py)."""
    plan = yaml.safe_load(DEMO.read_text())
    plan["target"]["workdir"] = str(tmp_path / "nowhere")
    plan["variants"] = [{"name": "baseline", "endpoint": "http://127.0.0.1:9"},
                        {"name": "eagle3", "endpoint": "http://127.0.0.1:10", "algorithm": "EAGLE3",
                         "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}]
    path = tmp_path / "endpoints.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    from harness.inputs.config import load_plan

    findings = await run_checks(load_plan(path), LocalTarget())
    assert not [f for f in findings if f.variant in ("baseline", "eagle3")], findings
    assert blocking(findings) == []
    # the same arm started by draftbench (no endpoint) is refused at load: EAGLE3 needs a drafter
    plan["variants"][1].pop("endpoint")
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = cli("check", str(path), cwd=tmp_path)
    assert out.returncode == 2 and "needs a drafter" in out.stderr, out.stderr
