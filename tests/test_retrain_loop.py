"""The retrain loop end to end on the stand-in: a drafter weak on Python code, its weak spot found in a run,
regenerated through the target, fine-tuned by the stand-in trainer, evaluated against the current drafter and
promoted only after the gate passed; interrupted in every long stage and resumed; a retrain on data that
misses the weak spot refused with nothing changed; the drift watch against the promotion's profile."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.common import events as ev
from harness.common.errors import InputError
from harness.inputs.config import load_drafter, load_plan
from harness.retrain import jobs as J
from harness.retrain.loop import LoopStep, retrain_loop
from harness.retrain.loop_state import RetrainSettings, list_records
from harness.serve.kept import kept_servers
from harness.targets import open_target
from tests.cli_helpers import cli_here
from tests.loop_helpers import REPO, write_scenario

pytestmark = pytest.mark.slow


async def _run(plan, results: Path, keep: bool = False) -> str:
    run_dir = ""
    async for e in run_plan(plan, results_dir=results, keep_servers=keep):
        if isinstance(e, ev.RunDone):
            assert e.complete, e
            run_dir = e.run_dir
    return run_dir


async def _until(plan, results: Path, stop, settings: RetrainSettings | None = None) -> list:
    """The loop's events until `stop(event)` is true (then the loop is closed: an interruption), or its
    end."""
    seen = []
    gen = retrain_loop(plan, "coder", settings=settings, results_dir=results)
    async with contextlib.aclosing(gen):
        async for e in gen:
            seen.append(e)
            if stop(e):
                break
    return seen


def _alive_kept(results: Path) -> list:
    """Process groups under results/ that a servers.jsonl lists as started or kept and that still run."""
    alive = []
    for k in kept_servers(results):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(k.pgid, 0)
            alive.append(k)
    return alive


def _state(results: Path):
    (rec,) = list_records(results)
    return rec


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def _cli_here(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """_cli in this process (tests.cli_helpers.cli_here), with the same HOME."""
    return cli_here(*args, cwd=cwd, env={"HOME": os.environ["HOME"]})


async def test_weak_drafter_is_retrained_promoted_and_every_stage_resumes(tmp_path):
    plan_path = write_scenario(tmp_path)
    results = tmp_path / "results"
    plan = load_plan(plan_path)
    source = await _run(plan, results, keep=True)  # its servers kept: the evaluation takes them over
    assert {k.variant for k in _alive_kept(results)} == {"baseline", "coder"}
    drafter_yaml = tmp_path / "drafters" / "weak-coder.yaml"

    # interrupted while regenerating: the server it started is stopped, the stage is redone on resume
    seen = await _until(plan, results, lambda e: isinstance(e, LoopStep) and e.stage == "regen")
    select = next(e for e in seen if isinstance(e, LoopStep) and e.stage == "select" and e.state == "done")
    assert "weak spots of coder" in select.text and "code (accept len 1." in select.text
    assert _state(results).done == ["select"]

    # interrupted once the training job is launched: the job runs on, detached; then it is cancelled too
    await _until(plan, results,
                 lambda e: isinstance(e, LoopStep) and e.stage == "train" and e.state == "started")
    rec = _state(results)
    assert rec.done == ["select", "regen"] and rec.job_id
    target = open_target("local")
    await target.connect()
    try:
        job = J.load_job(rec.job_id, results)
        cancelled = await J.cancel_job(target, await J.refresh_job(target, job, results), results)
        assert cancelled.state in ("cancelled", "finished")
    finally:
        await target.close()

    # interrupted in the evaluation run, after its first phase
    seen = await _until(plan, results, lambda e: isinstance(e, ev.PhaseDone))
    assert any(isinstance(e, LoopStep) and e.stage == "train" and "resumed" in e.text for e in seen) or \
        cancelled.state == "finished"
    rec = _state(results)
    assert rec.done == ["select", "regen", "train", "export"] and rec.eval_run
    eval_run = rec.eval_run

    seen = await _until(plan, results, lambda e: False)
    rec = _state(results)
    assert rec.eval_run == eval_run  # the same run directory, resumed
    assert '"adopted_from"' in (Path(eval_run) / "servers.jsonl").read_text()  # the source run's servers
    assert _alive_kept(results) == []  # every server kept between the looks, and those taken over, stopped
    assert rec.outcome == "promoted", rec.gate
    gate_step = next(e for e in seen if isinstance(e, LoopStep) and e.stage == "gate")
    assert gate_step.state == "done" and "PASSED" in gate_step.lines[0]
    assert all("-> pass: decided faster" in line for line in gate_step.lines[1:-1])

    drafter = load_drafter(drafter_yaml)
    assert drafter.path == rec.candidate_path and drafter.path.startswith(str(tmp_path / "work" / "retrain"))
    (entry,) = drafter.lineage
    assert (entry.previous_path, entry.job, entry.retrain_id) == ("demo-models/weak-coder", rec.job_id,
                                                                  rec.retrain_id)
    manifest = json.loads(Path(entry.data_manifest).read_text())
    assert manifest["run"] == source and {r["source"] for r in manifest["rows"]} == {"weak", "rest"}
    # specdec_bench's schema, as tune writes it, and ours
    profile = json.loads(Path(entry.profile).read_text())
    assert profile["validation"]["mean_consistency"]["passed"] \
        and set(profile["per_category"]) == {"code", "chat"}
    assert profile["draftbench"]["variant"] == rec.candidate \
        and profile["draftbench"]["categories"]["code"]["accept_low"]
    assert drafter.trained_against.hidden_size == 256
    regen_rows = Path(entry.training_data).read_text().splitlines()
    assert len(regen_rows) == len(manifest["rows"]) == len({json.loads(x)["id"] for x in regen_rows})
    assert load_plan(plan_path).variant("coder").drafter.path == rec.candidate_path  # the plan serves it now
    check = _cli("check", str(plan_path), cwd=tmp_path)  # its record matches the target: nothing to warn of
    assert check.returncode == 0 and "0 warnings" in check.stdout + check.stderr, check.stdout + check.stderr

    # the same command again starts a new loop, which needs a run of the promoted drafter first
    with pytest.raises(InputError, match="served its drafter as it is now"):
        await _until(load_plan(plan_path), results, lambda e: False)
    ended = [e async for e in retrain_loop(plan, "coder", results_dir=results, resume=rec.retrain_id)]
    assert [e.state for e in ended] == ["skipped"] and "already ended: promoted" in ended[0].text
    assert len(list_records(results)) == 1

    # the drift watch: the weak drafter's run against the promoted profile alarms; a check run does not
    res = _cli("watch", str(plan_path), "--variant", "coder", "--run", source, "--results-dir", str(results),
               cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stdout.startswith("ALARM coder: code drift") and "chat\tok" in res.stdout
    res = _cli("watch", str(plan_path), "--variant", "coder", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert res.stdout.startswith("coder: acceptance as recorded")
    log = (results / "watch" / "loop-coder.jsonl").read_text().splitlines()
    states = [{r["category"]: r["state"] for r in json.loads(x)["rows"]} for x in log]
    # the check run's code figure comes from six probed requests (one pass): a lucky six (verify counts
    # 10, 10, 10, 11, 11, 11 of 10-14 once) put its interval above the recorded one, "better", no alarm
    assert states[0]["code"] == "drift" and states[1]["code"] in ("ok", "better") \
        and set(states[1]) == {"code", "chat", "(all)"}


def test_a_retrain_that_does_not_help_is_refused_and_nothing_changes(tmp_path):
    plan_path = write_scenario(tmp_path, concurrency=(1,))
    results = tmp_path / "results"
    res = _cli_here("run", str(plan_path), "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    before = (tmp_path / "drafters" / "weak-coder.yaml").read_bytes()
    chat = tmp_path / "chat-log.jsonl"  # real traffic that never asks for Python: no help for the weak spot
    chat.write_text("".join(json.dumps({"custom_id": f"r{i}", "body": {"messages": [
        {"role": "user", "content": f"Share a tip about gardening, number {i}."}]}}) + "\n"
                            for i in range(6)))
    res = _cli_here("retrain", str(plan_path), "--variant", "coder", "--by", "prompt", "--rest-share", "0",
               "--traffic", str(chat), "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-1500:]
    assert "REFUSED, nothing changes" in res.stdout and "\n  c1: " in res.stdout
    assert "[gate] not promoted:" in res.stderr
    assert (tmp_path / "drafters" / "weak-coder.yaml").read_bytes() == before
    (rec,) = list_records(results)
    assert rec.outcome == "refused" and rec.reason and "promote" not in rec.done
    manifest = json.loads(Path(rec.manifest).read_text())
    assert {r["source"] for r in manifest["rows"]} == {"traffic"}
    # weak-spots from the command line: the same table the loop started from
    ws = _cli_here("weak-spots", str(rec.source_run), "--variant", "coder", cwd=tmp_path)
    assert ws.returncode == 0 and ws.stdout.splitlines()[1].startswith("*\tcode\t")
