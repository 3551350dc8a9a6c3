"""A port another process takes between `free_port` and the server's bind: its /health answers, ours fails to
bind. Readiness must not take that answer for this server's (every number would be the other one's): the
server fails with the reason and the stand-in's own bind error, as SGLang logs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.inputs.config import load_plan
from harness.serve.server import Server, ServerFailed
from harness.targets.listeners import Listeners, parse_listeners, port_listeners
from harness.targets.local import LocalTarget
from tests.faults_helpers import SIM_LAUNCHER, live_groups, prompts, write_plan
from tests.test_target_local import eventually

# answers 200 to every GET (/health, /health_generate, /v1/models): a server that is not ours
RESPONDER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(b'{"data": []}')
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_parse_listeners():
    assert parse_listeners("none\n") == Listeners(True, ())
    got = parse_listeners("120 118\n121 118\n")
    assert got == Listeners(False, ((120, 118), (121, 118)))
    assert got.foreign_to(118) is None and got.foreign_to(7) == (120, 118)
    # a listener /proc cannot attribute (another user's): unknown, not foreign
    assert parse_listeners("").foreign_to(7) is None
    assert Listeners(True, ()).foreign_to(7) is None
    assert parse_listeners("sh: find: not found") is None


def _plan(tmp_path: Path, startup_s: float):
    return load_plan(write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                                env={"DRAFTBENCH_SIM_STARTUP_S": str(startup_s),
                                     "DRAFTBENCH_SIM_TIME_SCALE": "0.3"},
                                variants=[{"name": "baseline"}], suite_prompts=prompts(2),
                                run={"concurrency": [1]}))


def _server(tmp_path: Path, startup_s: float) -> Server:
    plan = _plan(tmp_path, startup_s)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return Server(LocalTarget(), plan, plan.variants[0], run_id="port", run_dir=run_dir, engine_version=None,
                  on_lines=lambda lines: None, api_key=None)


async def _answers(port: int) -> bool:
    try:
        await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/health", timeout=2)
    except OSError:
        return False
    return True


async def test_a_port_taken_before_the_bind_is_not_ready(tmp_path: Path):
    server = _server(tmp_path, startup_s=4.0)
    await server.start()
    assert server.port is not None and server.pgid is not None
    foreign = subprocess.Popen([sys.executable, "-c", RESPONDER, str(server.port)], start_new_session=True)
    try:
        # the other process holds the port before the stand-in binds it
        await eventually(lambda: _answers(server.port), "the other server")
        got = await port_listeners(server.target, server.port)
        assert got is not None and got.foreign_to(server.pgid) == (foreign.pid, os.getpgid(foreign.pid))
        with pytest.raises(ServerFailed) as err:
            await server.wait_ready(60)
        reason = err.value.reason
        assert reason.startswith("exited before it became ready")
        assert f"from pid {foreign.pid}" in reason and "another process took the port" in reason
        assert any("error while attempting to bind" in line for line in err.value.last_lines)
    finally:
        foreign.kill()
        foreign.wait()
        await server.stop()
    assert server.pgid not in live_groups()


async def test_a_server_holding_its_own_port_is_ready(tmp_path: Path):
    server = _server(tmp_path, startup_s=0.2)
    await server.start()
    try:
        await server.wait_ready(60)
        got = await port_listeners(server.target, server.port)
        assert got is not None and not got.none and server.pgid in {g for _, g in got.holders}
        assert server.port_holder is None
    finally:
        await server.stop()
