"""Training-data regeneration against the SGLang stand-in: over the loopback sshd with the plan's baseline
server started and stopped by regen, interrupted and resumed; and a driver process SIGKILLed mid-run,
resumed against two endpoints. Every input id ends up exactly once (output or error file)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.common.errors import HarnessError, InputError
from harness.retrain.data import error_path
from harness.retrain.regen import normalize_endpoint, regen
from harness.targets import open_target
from tests.retrain_helpers import REPO, SIM_ENV, conversation, read_jsonl, write_jsonl, write_plan
from tests.sshd import sshd_missing_reason, start_sshd

OLD = "an old answer"


def dataset(n: int) -> list[dict]:
    """n rows: multi-turn, ShareGPT, ending with a user turn, with a system prompt; plus two bad rows."""
    rows = [conversation(i, turns=1 + i % 3, sharegpt=i % 4 == 1, end_with_user=i % 5 == 2) for i in range(n)]
    rows[3]["conversations"].insert(0, {"role": "system", "content": "Answer in one line."})
    rows.append(
        {
            "id": "starts-with-assistant",
            "conversations": [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}],
        }
    )
    rows.append({"id": "too-long", "conversations": [{"role": "user", "content": "word " * 9000}]})
    return rows


def user_turns(row: dict) -> list[str]:
    return [
        m.get("content", m.get("value"))
        for m in row["conversations"]
        if m.get("role", m.get("from")) in ("user", "human")
    ]


def check_exactly_once(inp: Path, out: Path) -> tuple[list[dict], list[dict]]:
    ok, bad = read_jsonl(out), read_jsonl(error_path(out))
    ids = [r["id"] for r in ok + bad]
    assert sorted(ids) == sorted(r["id"] for r in read_jsonl(inp))  # every input id, none twice
    assert {r["status"] for r in ok} <= {"success"} and {r["status"] for r in bad} <= {"error"}
    return ok, bad


def check_regenerated(source: dict, row: dict) -> None:
    conv = row["conversations"]
    assert [m["role"] for m in conv if m["role"] != "system"] == ["user", "assistant"] * len(
        user_turns(source)
    )
    assert [m["content"] for m in conv if m["role"] == "user"] == user_turns(source)
    answers = [m["content"] for m in conv if m["role"] == "assistant"]
    assert all(a and OLD not in a for a in answers)  # the target's own answers, the old ones gone
    if source["conversations"][0].get("role") == "system":
        assert conv[0] == {"role": "system", "content": "Answer in one line."}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def group_alive(pgid: int) -> bool:
    ps = subprocess.run(["ps", "-A", "-o", "pgid=", "-o", "stat="], capture_output=True, text=True).stdout
    return any(
        line.split()[0] == str(pgid) and not line.split()[1].startswith("Z") for line in ps.splitlines()
    )


@pytest.mark.ssh
async def test_regen_over_ssh_interrupted_and_resumed(sshd, tmp_path):
    plan, _ = write_plan(tmp_path, host=sshd.alias)
    inp = write_jsonl(tmp_path / "prompts.jsonl", dataset(24))
    out = tmp_path / "data" / "regen.jsonl"
    results = tmp_path / "results"
    target = open_target(sshd.alias, config=[sshd.ssh_config])

    # first run: stopped by the consumer after a few rows (the TUI's cancel, or Ctrl-C)
    events = []
    agen = regen(
        plan, inp, out, concurrency=4, max_tokens=16, temperature=0.0, target=target, results_dir=results
    )
    async for e in agen:
        events.append(e)
        if e.ok >= 6:
            break
    await agen.aclose()
    assert [e.state for e in events[:2]] == ["starting-server", "server-ready"]
    servers = [
        json.loads(x) for x in next((results / "regen").glob("*/servers.jsonl")).read_text().splitlines()
    ]
    assert servers[0]["target"] == sshd.alias and servers[-1]["state"] == "stopped"
    assert not group_alive(servers[0]["pgid"])  # the baseline server went with the regen
    first, first_errors = read_jsonl(out), read_jsonl(error_path(out))
    assert len(first) >= 6 and len({r["id"] for r in first}) == len(first)

    # resume: finished ids are skipped, the rest is done, bad rows are recorded as errors
    final = None
    async for e in regen(
        plan, inp, out, concurrency=8, max_tokens=16, temperature=0.0, target=target, results_dir=results
    ):
        final = e
    await target.close()
    assert final.state == "done" and final.already == len(first) + len(first_errors) and final.remaining == 0
    assert final.already + final.done == final.total == 26
    ok, bad = check_exactly_once(inp, out)
    sources = {r["id"]: r for r in read_jsonl(inp)}
    for row in ok:
        check_regenerated(sources[row["id"]], row)
    errors = {r["id"]: r["error"] for r in bad}
    assert errors["starts-with-assistant"] == "Data starts with an assistant message"
    assert errors["too-long"].startswith("http 400") and "context length" in errors["too-long"]
    assert final.output_tokens > 0 and final.rows_per_s and final.tokens_per_s
    print(f"\nregen over ssh (stand-in, concurrency 8, max_tokens 16): {final.note()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sim(workdir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.sim",
                "--model-path",
                str(workdir / "demo-models" / "target"),
                "--port",
                str(port),
                "--max-running-requests",
                "64",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **SIM_ENV, "DRAFTBENCH_SIM_STARTUP_S": "0.05"},
        )
    return proc, f"127.0.0.1:{port}"


def wait_healthy(proc: subprocess.Popen, endpoint: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://{endpoint}/health_generate", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"stand-in on {endpoint} not healthy: {log.read_text()[-2000:]}")


DRIVER = """
import asyncio, sys
from harness.inputs.config import load_plan
from harness.retrain.regen import regen
async def main():
    plan = load_plan(sys.argv[1])
    async for e in regen(plan, sys.argv[2], sys.argv[3], endpoints=[sys.argv[4]], concurrency=4,
                         max_tokens=48, temperature=0.0):
        print(e.state, e.done, flush=True)
asyncio.run(main())
"""


async def test_regen_killed_hard_then_resumed_on_two_endpoints(tmp_path):
    plan, workdir = write_plan(tmp_path)
    inp = write_jsonl(tmp_path / "prompts.jsonl", dataset(40))
    out = tmp_path / "regen.jsonl"
    servers = [start_sim(workdir, tmp_path / f"sim{i}.log") for i in range(2)]
    try:
        for i, (proc, ep) in enumerate(servers):
            wait_healthy(proc, ep, tmp_path / f"sim{i}.log")
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(plan.source_path), str(inp), str(out), servers[0][1]],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            for line in driver.stdout:  # wait for rows to be written, then kill without warning
                if int(line.split()[1]) >= 8:
                    break
            os.kill(driver.pid, signal.SIGKILL)
        finally:
            driver.kill()
            driver.wait()
        before = read_jsonl(out) + read_jsonl(error_path(out))
        assert 8 <= len(before) < 42

        endpoints = [servers[0][1], f"http://{servers[1][1]}/v1"]
        logs = [tmp_path / f"sim{i}.log" for i in range(2)]
        sizes = [log.stat().st_size for log in logs]
        final = None
        async for e in regen(
            plan, inp, out, endpoints=endpoints, concurrency=16, max_tokens=48, temperature=0.0
        ):
            final = e
        assert final.state == "done" and final.already == len(before) and final.already + final.done == 42
        ok, bad = check_exactly_once(inp, out)
        assert {r["id"] for r in bad} == {"starts-with-assistant", "too-long"}
        sources = {r["id"]: r for r in read_jsonl(inp)}
        for row in ok:
            check_regenerated(sources[row["id"]], row)
        # both endpoints served rows of the resumed run
        assert all(
            "Prefill batch" in log.read_bytes()[size:].decode() for log, size in zip(logs, sizes, strict=True)
        )
        print(f"\nregen on 2 endpoints (stand-in, concurrency 16, max_tokens 48): {final.note()}")

        again = [e async for e in regen(plan, inp, out, endpoints=endpoints, concurrency=4, max_tokens=48)]
        assert len(again) == 1 and again[0].state == "done" and again[0].done == 0 and again[0].already == 42

        retried = [
            e async for e in regen(plan, inp, out, endpoints=endpoints, max_tokens=8, retry_errors=True)
        ]
        assert (
            retried[-1].done == 2 and retried[-1].errors == 2
        )  # the bad rows were tried again (and fail again)
        check_exactly_once(inp, out)
    finally:
        for proc, _ in servers:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_regen_input_problems_are_reported_before_anything_starts(tmp_path):
    plan, _ = write_plan(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(conversation(1)) + "\n" + '{"id": "x", "conversations": [{"from": "alien"}]}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: conversations\[0\]: unknown role 'alien'"):
        async for _ in regen(plan, bad, tmp_path / "out.jsonl"):
            pass
    with pytest.raises(InputError, match="must not be the input"):
        async for _ in regen(plan, bad, bad):
            pass
    assert normalize_endpoint("node7:30000") == "http://node7:30000/v1"
    assert normalize_endpoint("http://router:8000/v1/") == "http://router:8000/v1"
    with pytest.raises(InputError, match="only http"):
        normalize_endpoint("grpc://node7:30000")


async def test_unreachable_endpoint_defers_rows_and_stops(tmp_path):
    plan, _ = write_plan(tmp_path)
    inp = write_jsonl(tmp_path / "prompts.jsonl", [conversation(i) for i in range(20)])
    out = tmp_path / "out.jsonl"
    events = []
    with pytest.raises(
        HarnessError, match=r"3 connection faults in a row, last: http://127\.0\.0\.1:\d+/v1: connection"
    ):
        async for e in regen(
            plan, inp, out, endpoints=[f"127.0.0.1:{free_port()}"], concurrency=2, max_retries=0
        ):
            events.append(e)
    assert events[-1].deferred >= 3 and events[-1].done == 0  # the other worker may defer one more
    assert read_jsonl(out) == [] and read_jsonl(error_path(out)) == []  # nothing recorded as a row error
