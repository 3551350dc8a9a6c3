"""The API key of a started server is handed over by file, never on a command line: `ps` during the run shows
no key, the target's work directory keeps no key file, the run directory has no byte of it, and the run warns
that SGLang itself printed it into its log on the target. vLLM and its stand-in read VLLM_API_KEY."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.demo import write_demo_models
from harness.common import events as ev
from harness.common.errors import HarnessError
from harness.engines import get_engine
from harness.inputs.config import load_plan
from harness.serve.key_handoff import hand_over
from tests.faults_helpers import reap_servers
from tests.test_engines_e2e import PLAN

KEY = "sk-handoff-4f1c9a77e2b04d5f"


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _ps() -> str:
    return subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True).stdout


async def test_started_servers_get_the_key_off_the_command_line(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DB_HANDOFF_KEY", KEY)
    workdir = tmp_path / "work"
    write_demo_models(workdir)
    text = PLAN.format(host="local", python=sys.executable, workdir=json.dumps(str(workdir)))
    text = text.replace("  startup_timeout_s: 60\n",
                        "  startup_timeout_s: 60\n  api_key_env: DB_HANDOFF_KEY\n")
    text = text.replace("  max_tokens: 96\n", "  max_tokens: 8\n")
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    plan = load_plan(path)
    plan.variants = [v for v in plan.variants if v.name in ("sgl-base", "vllm-base")]

    seen_ps: dict[str, str] = {}
    alarms: list[ev.Alarm] = []
    done: ev.RunDone | None = None
    async for e in run_plan(plan, results_dir=tmp_path / "results"):
        if isinstance(e, ev.RequestDone) and e.record.variant not in seen_ps:
            seen_ps[e.record.variant] = _ps()  # the server is up and serving
        elif isinstance(e, ev.Alarm):
            alarms.append(e)
        elif isinstance(e, ev.RunDone):
            done = e
    assert done is not None and done.complete and not done.extra.get("request_errors"), alarms
    assert set(seen_ps) == {"sgl-base", "vllm-base"}
    for variant, ps in seen_ps.items():
        assert "harness.sim" in ps  # the stand-ins were running when ps looked ...
        assert KEY not in ps, f"the key is on a command line while {variant} runs"  # ... without the key

    run_dir = Path(done.run_dir)
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
    target_run = workdir / "runs" / run_dir.name
    assert not list(target_run.glob("*.key.*"))  # the key files are deleted
    # SGLang prints ServerArgs (api_key included) into its own log: said, with the file; vLLM read the
    # variable
    assert KEY in (target_run / "sgl-base.log").read_text()
    assert KEY not in (target_run / "vllm-base.log").read_text()
    warned = [a for a in alarms if a.code == "key-in-server-log"]
    assert [a.variant for a in warned] == ["sgl-base"]
    assert str(target_run / "sgl-base.log") in warned[0].message


class _Target:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def write_private(self, path: str, data: bytes) -> None:
        self.files[path] = data


async def test_hand_over_per_engine():
    t = _Target()
    argv, to_delete = await hand_over(t, get_engine("vllm"), ["vllm", "serve", "m"], "k'ey", "/w/r/v")
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["/w/r/v.key.env", "vllm", "serve", "m"]
    assert to_delete is None
    assert t.files["/w/r/v.key.env"] == b"VLLM_API_KEY='k'\"'\"'ey'\n"
    argv, to_delete = await hand_over(t, get_engine("sglang"), ["python", "-m", "sglang.launch_server"], "k",
                                      "/w/v")
    assert argv[-2:] == ["--config", "/w/v.key.json"] and to_delete == "/w/v.key.json"
    assert json.loads(t.files["/w/v.key.json"]) == {"api-key": "k"}
    with pytest.raises(HarnessError, match="already has --config"):
        await hand_over(t, get_engine("sglang"), ["x", "--config", "mine.yaml"], "k", "/w/v")


def test_the_vllm_stand_in_reads_vllm_api_key(tmp_path: Path, monkeypatch):
    """As vLLM's api_server: `args.api_key or envs.VLLM_API_KEY`."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from harness.sim.vllm.args import parse
    from harness.sim.vllm.server import Sim, build_app

    write_demo_models(tmp_path)
    monkeypatch.setenv("VLLM_API_KEY", KEY)

    async def go() -> tuple[int, int, int]:
        sim = Sim(parse(["serve", str(tmp_path / "demo-models" / "target")]), "m")
        async with TestClient(TestServer(build_app(sim))) as c:
            bare = (await c.get("/v1/models")).status
            good = (await c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})).status
            health = (await c.get("/health")).status
        return bare, good, health

    assert asyncio.run(go()) == (401, 200, 200)
