"""The engine seam's contract: every engine in ENGINE_NAMES passes the same tests (STYLE.md, "Seams")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from harness.engines import ENGINE_NAMES, get_engine
from harness.engines.base import REQUEST_SPEC_KEYS, SPEC_MODES, Engine, LaunchCheck
from harness.inputs.config import Plan
from harness.inputs.plan_parts import Engine as EngineName
from harness.inputs.plan_parts import Target

FIXTURES = Path(__file__).parent / "fixtures"


def _plan(engine: str) -> Plan:
    return Plan.model_validate({
        "name": "contract", "engine": engine, "target": {"simulated": True},
        "model": {"path": "demo-models/target"},
        "variants": [{"name": "base"},
                     {"name": "spec", "drafter": {"name": "d", "path": "demo-models/good-eagle3"},
                      "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})


def _sample_lines(name: str) -> list[str]:
    if name == "vllm":
        return [ln for ln in (FIXTURES / "vllm" / "log_lines.txt").read_text().splitlines()
                if ln and not ln.startswith("#")]
    log = FIXTURES / "sglang-0.5.15.post1" / "server-eagle3.log"
    return [ln for ln in log.read_text(errors="replace").splitlines() if "Decode batch" in ln][:50]


def test_config_names_every_engine():
    assert set(get_args(EngineName)) == set(ENGINE_NAMES)


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_engine_satisfies_the_protocol(name):
    engine = get_engine(name)
    assert isinstance(engine, Engine) and engine.name == name
    assert isinstance(engine.accept_needs_flush, bool) and engine.ready_line


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_launch_argv_is_a_list_of_str_with_the_port(name):
    engine, plan = get_engine(name), _plan(name)
    for v in plan.variants:
        argv = engine.launch_argv(plan, v, 31234, engine.stand_in_version)
        assert all(isinstance(a, str) for a in argv) and "31234" in argv


@pytest.mark.parametrize("name", ENGINE_NAMES)
@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_the_algorithm_flag_findings_name_is_what_the_argv_launches(name, algorithm):
    engine, plan = get_engine(name), _plan(name)
    spec = plan.variants[1].model_copy(update={"algorithm": algorithm})
    joined = " ".join(engine.launch_argv(plan, spec, 31234, engine.stand_in_version))
    flag = engine.algorithm_flag(algorithm)
    value = flag.split()[-1]  # SGLang: EAGLE3; vLLM: "eagle3", as the JSON of --speculative-config has it
    assert flag.split()[0] in joined and re.search(rf"[\s:]{re.escape(value)}(?=[\s,}}]|$)", joined), \
        (flag, joined)

@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_real_log_lines_give_windows_with_accept_len(name):
    engine = get_engine(name)
    windows = [w for i, ln in enumerate(_sample_lines(name)) if (w := engine.parse_log_line(ln, i + 1))]
    assert windows and any(w.accept_len is not None for w in windows)
    assert get_engine(name).parse_log_line("an ordinary line", 1) is None


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_request_spec_and_modes(name):
    engine, plan = get_engine(name), _plan(name)
    assert set(engine.request_spec(None, 5)) == set(REQUEST_SPEC_KEYS)
    for v in plan.variants:
        mode = engine.spec_mode(plan.run, v, engine.stand_in_version)
        assert mode in SPEC_MODES
        extra = engine.spec_request_extra(mode)
        assert extra is None or isinstance(extra, dict)
    assert engine.phase_server_means(None, None).keys() >= set(engine.phase_columns)


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_engine_declares_the_options_the_plan_holds_for_it(name):
    """`target.<name>:` is validated as the engine's own options model, and the engine reads its own there."""
    engine = get_engine(name)
    assert Target.model_fields[name].annotation is engine.options_model
    node = Target.model_validate({name: {"launcher": ["{python}", "-m", "x"], "version": "1.2.3"}})
    assert engine.options(node) is getattr(node, name)
    assert engine.launcher_argv(node) == [node.python, "-m", "x"]
    moved_here = {field for engine_name, field in Target.moved_keys.values() if engine_name == name}
    assert moved_here <= set(engine.options_model.model_fields)


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_shape_of_the_engines_grid_launches_without_an_error(name):
    """The tune's grid (spec_grid) holds only shapes the engine's own preflight rules accept."""
    engine, plan = get_engine(name), _plan(name)
    spec = plan.variant("spec")
    shapes = engine.spec_grid([1, 2, 3, 5], [1, 2, 4, 8], [2, 3, 4, 6, 8, 16, 32])
    assert shapes and len(set(shapes)) == len(shapes) and all(s.eagle_topk >= 1 for s in shapes)
    skip = len(engine.launcher_argv(plan.target))
    base_argv = engine.launch_argv(plan, plan.baseline_of(spec), 1, engine.stand_in_version)[skip:]
    for shape in shapes:
        v = spec.model_copy(update={"num_steps": shape.num_steps, "eagle_topk": shape.eagle_topk,
                                    "num_draft_tokens": shape.num_draft_tokens})
        argv = engine.launch_argv(plan, v, 1, engine.stand_in_version)[skip:]
        check = LaunchCheck(plan, v, argv, base_argv, None, engine.stand_in_version, None, 8)
        found = engine.launch_findings(check)
        assert not [f for f in found if f.severity == "error"], (shape, found)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_stand_in_end_to_end_through_the_seam(name, tmp_path):
    """Each engine's stand-in, started by that engine's own launch argv: ready, provenance, a phase's
    delta."""
    import asyncio
    import os
    import subprocess
    import sys
    import time

    import aiohttp

    from harness.cli.demo import write_demo_models

    write_demo_models(tmp_path)
    engine = get_engine(name)
    plan = Plan.model_validate({
        "name": "contract", "engine": name,
        "target": {"simulated": True, "python": sys.executable, "launcher": ["{python}", "-m", "harness.sim"],
                   "vllm_launcher": ["{python}", "-m", "harness.sim.vllm", "serve"]},
        "model": {"path": "demo-models/target", "served_model_name": "demo-target"},
        "variants": [{"name": "base"},
                     {"name": "spec", "drafter": {"name": "d", "path": "demo-models/good-eagle3"},
                      "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})
    port = _free_port()
    argv = engine.launch_argv(plan, plan.variant("spec"), port, engine.stand_in_version)
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "DRAFTBENCH_SIM_STARTUP_S": "0.1"})

    async def drive() -> None:
        admin = engine.admin(f"http://127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + 60
            while not await admin.healthy(timeout=2):
                assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert engine.ready_line in (tmp_path / "server.log").read_text()
            assert await admin.model_id() == "demo-target"
            prov = engine.server_provenance(await admin.server_info())
            assert prov["server_version"] == engine.stand_in_version
            before = await admin.histograms()
            body = {"model": "demo-target", "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 32, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                                           json=body) as r:
                assert r.status == 200 and (await r.read()).rstrip().endswith(b"data: [DONE]")
            row = engine.phase_server_means(before, await admin.histograms())
            assert row["server_requests"] == 1
            accept = row.pop("server_accept_len", None) or engine.server_accept_len(await admin.server_info())
            assert accept is not None and accept > 1.0
        finally:
            await admin.close()

    try:
        asyncio.run(drive())
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
