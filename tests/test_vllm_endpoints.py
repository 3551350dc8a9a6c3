"""vLLM servers draftbench did not start (`endpoint:` variants with `engine: vllm`) in a plan whose engine is
SGLang's default: asked as vLLM (its /health, /metrics, /server_info), their speculative config read from
/server_info's VllmConfig text and checked against the plan, measured, never stopped. Before, such a variant
was asked as SGLang (/health_generate) and failed; then, with that fixed, a speculative one failed as "runs no
speculative algorithm" because the vLLM engine read nothing from /server_info. Found on `vllm.sh dry`'s gap
plan (the H200 measure run's vLLM servers, measured again between vllm bench serve's rounds)."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.analysis.store import VariantMeta
from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.engines.vllm.config_text import spec_facts
from harness.inputs.config import load_plan
from harness.serve.existing import declared_vs_served
from harness.sim.vllm.args import parse
from harness.sim.vllm.info import config_text
from tests.faults_helpers import (
    SIM_LAUNCHER,
    only_run_dir,
    prompts,
    read_csv,
    reap_servers,
    sim_env,
    write_plan,
)
from tests.workload_helpers import ENV, write_models

REAL_LOGS = Path(__file__).parent / "fixtures" / "vllm-0.26.0" / "measure" / "logs"


def _start(root: Path, name: str, *flags: str, dev: bool = True) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **ENV, "VLLM_SERVER_DEV_MODE": "1" if dev else "0"}
    log = open(root / f"{name}.log", "wb")  # noqa: SIM115 (the server writes it until stopped)
    argv = [sys.executable, "-m", "harness.sim.vllm", "serve", str(root / "target"), "--port", str(port),
            *flags]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (root / f"{name}.log").read_text()
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return url, proc
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.05)
    raise TimeoutError(f"vLLM stand-in {name} not healthy within 60 s")


def _spec_flags(root: Path) -> list[str]:
    return ["--speculative-config", json.dumps({"method": "eagle3", "model": str(root / "good"),
                                                "num_speculative_tokens": 3})]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = write_models(tmp_path_factory.mktemp("vllm-endpoints"))
    started = {"base": _start(root, "base"), "spec": _start(root, "spec", *_spec_flags(root)),
               "spec-nodev": _start(root, "spec-nodev", *_spec_flags(root), dev=False)}
    yield {k: url for k, (url, _) in started.items()}
    for _, proc in started.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _plan(tmp_path: Path, base: str, spec: str, **spec_variant):
    variants = [{"name": "vllm-base", "engine": "vllm", "endpoint": base},
                {"name": "vllm-eagle3", "engine": "vllm", "endpoint": spec, "algorithm": "EAGLE3",
                 **spec_variant}]
    path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER, env=sim_env(),
                      variants=variants, suite_prompts=prompts(4),
                      run={"concurrency": [2], "max_tokens": 16, "repeats": 1})
    return load_plan(path)


async def _run(tmp_path: Path, plan) -> tuple[int, Path, str]:
    out = io.StringIO()
    rc = await consume(run_plan(plan, results_dir=tmp_path / "results"), out=out)
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    return rc, run_dir, out.getvalue()


def _chain(k: int) -> dict[str, int]:
    """vLLM's EAGLE-3 is a chain of K: what a plan names for it (all three, as the plan's check asks)."""
    return {"num_steps": k, "eagle_topk": 1, "num_draft_tokens": k + 1}


def _variants(run_dir: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in (run_dir / "variants.jsonl").read_text().splitlines()]
    return {r["variant"]: r for r in rows}


async def test_vllm_endpoints_are_asked_as_vllm_and_checked_against_their_config(tmp_path, servers):
    rc, run_dir, _ = await _run(tmp_path, _plan(tmp_path, servers["base"], servers["spec"], **_chain(3)))
    assert rc == 0
    meta = _variants(run_dir)
    assert meta["vllm-eagle3"]["status"] == "ok" and meta["vllm-eagle3"]["engine"] == "vllm"
    # the config the server runs, read from /server_info: K = 3, a chain, K + 1 tokens a step
    assert (meta["vllm-eagle3"]["num_steps"], meta["vllm-eagle3"]["eagle_topk"],
            meta["vllm-eagle3"]["num_draft_tokens"]) == (3, 1, 4)
    summary = {r["variant"]: r for r in read_csv(run_dir / "summary.csv")}
    assert float(summary["vllm-eagle3"]["accept_len"]) > 1.5
    assert summary["vllm-eagle3"]["compared_with"] == "vllm-base"
    for url in (servers["base"], servers["spec"]):  # never stopped
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert r.status == 200


async def test_a_plan_that_does_not_match_the_vllm_server_fails_that_variant(tmp_path, servers):
    rc, run_dir, _ = await _run(tmp_path, _plan(tmp_path, servers["base"], servers["spec"], **_chain(5)))
    assert rc != 0
    meta = _variants(run_dir)
    assert meta["vllm-base"]["status"] == "ok" and meta["vllm-eagle3"]["status"] == "failed"
    assert "declares num_steps 5 but the server runs 3" in meta["vllm-eagle3"]["failure"]


async def test_without_dev_mode_the_plan_is_taken_as_given_and_said(tmp_path, servers, capsys):
    rc, run_dir, _ = await _run(tmp_path, _plan(tmp_path, servers["base"], servers["spec-nodev"]))
    assert rc == 0
    assert _variants(run_dir)["vllm-eagle3"]["status"] == "ok"
    assert "WARNING existing-server: the server did not say which speculative config it runs (vLLM says it " \
        "at /server_info only with VLLM_SERVER_DEV_MODE=1)" in capsys.readouterr().err


def test_the_config_text_reads_as_the_real_servers():
    """The real vLLM 0.26.0's config text (its log's "with config:") and the stand-in's /server_info text
    give the same facts for the same speculative config; None for a server without one."""
    def logged(name: str) -> str:
        text = gzip.open(REAL_LOGS / f"{name}.log.gz", "rt", encoding="utf-8").read()
        return text[text.index("with config: "):].splitlines()[0]

    real = spec_facts(logged("vllm-eagle3"))
    assert real == {"server_speculative_algorithm": "EAGLE3", "server_speculative_num_steps": 3,
                    "server_speculative_draft_model_path": "/tmp/tiny/draft",
                    "server_speculative_eagle_topk": 1, "server_speculative_num_draft_tokens": 4}
    assert spec_facts(logged("vllm-base")) == {"server_speculative_algorithm": None}
    ns = parse(["serve", "/tmp/tiny/tiny-stdlib", "--speculative-config",
                '{"method": "eagle3", "model": "/tmp/tiny/draft", "num_speculative_tokens": 3}'])
    ours = config_text(ns)
    assert spec_facts(ours) == real
    # the same leading fields, in the same order, as the real text
    names = [f.split("=", 1)[0] for f in ours.split(", ") if "=" in f and "(" not in f.split("=", 1)[0]]
    real_text = logged("vllm-eagle3")
    assert real_text.startswith("with config: " + ours.split(", tokenizer_mode")[0])
    assert all(f"{n}=" in real_text for n in names)
    assert spec_facts("no config here") == {} and spec_facts(None) == {}


def test_an_unknown_config_is_a_warning_not_a_mismatch():
    plan_variant = load_plan_variant()
    errors, warnings = declared_vs_served(plan_variant, VariantMeta(variant="v"))
    assert errors == [] and "VLLM_SERVER_DEV_MODE=1" in warnings[0]


def load_plan_variant():
    from harness.inputs.config import Variant

    return Variant(name="v", engine="vllm", endpoint="http://127.0.0.1:1", algorithm="EAGLE3")
