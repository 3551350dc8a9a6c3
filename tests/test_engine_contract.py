"""The engine seam's contract: every engine in ENGINE_NAMES passes the same tests (STYLE.md, "Seams")."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from harness.engines import ENGINE_NAMES, get_engine
from harness.engines.base import REQUEST_SPEC_KEYS, SPEC_MODES, Engine
from harness.inputs.config import Engine as EngineName
from harness.inputs.config import Plan

FIXTURES = Path(__file__).parent / "fixtures"


def _plan(engine: str) -> Plan:
    return Plan.model_validate({
        "name": "contract", "engine": engine, "target": {"simulated": True},
        "model": {"path": "demo-models/target"},
        "variants": [{"name": "base"}, {"name": "spec", "drafter": {"name": "d", "path": "demo-models/good-eagle3"},
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
def test_real_log_lines_give_windows_with_accept_len(name):
    windows = [w for i, ln in enumerate(_sample_lines(name)) if (w := get_engine(name).parse_log_line(ln, i + 1))]
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
