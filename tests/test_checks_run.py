"""run_checks end to end: over the local target and over the test sshd, on the demo plan (stand-in), on
plans for a "real" target (a fake sglang package and a fake nvidia-smi) and without SGLang at all."""

from __future__ import annotations

import json
import shutil
import socket
import sys

import pytest

from harness.checks import findings_json, has_errors, render_findings, run_checks
from harness.cli.demo import prepare_demo
from harness.common.safetensors_io import header_length
from harness.targets import open_target
from harness.targets.local import LocalTarget
from tests.checks_helpers import load, write_fake_nvidia_smi, write_fake_sglang, write_models, write_plan
from tests.sshd import SSHDServer, sshd_missing_reason, start_sshd

SPEC = {
    "drafter": "draft.yaml",
    "algorithm": "EAGLE3",
    "num_steps": 3,
    "eagle_topk": 1,
    "num_draft_tokens": 4,
}


def _by(findings, variant=None, code=None, severity=None):
    return [
        f
        for f in findings
        if (variant is None or f.variant == variant)
        and (code is None or f.code == code)
        and (severity is None or f.severity == severity)
    ]


class RecordingTarget(LocalTarget):
    """LocalTarget that records every read_file call, to prove only header bytes travel."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int | None]] = []

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        self.reads.append((path, max_bytes))
        return await super().read_file(path, max_bytes=max_bytes)


def undeclared_demo(tmp_path):
    """The demo plan with its wrong arm's `expect:` dropped: the raw check reports it as an error."""
    plan = prepare_demo(tmp_path)
    plan.variant("wrong-flag-eagle").expect = []
    return plan


async def test_demo_plan_reports_the_wrong_flag_variant(tmp_path):
    plan = undeclared_demo(tmp_path)
    target = RecordingTarget()
    findings = await run_checks(plan, target)
    errors = _by(findings, severity="error")
    assert {(f.variant, f.code) for f in errors} == {("wrong-flag-eagle", "eagle3-drafter-with-eagle")}
    assert has_errors(findings)
    assert _by(findings, "seed-weak-eagle3", "cuda-graph-disabled", "warning")
    assert _by(findings, code="simulated")
    table = render_findings(findings)
    assert "wrong-flag-eagle" in table and "EAGLE3" in table and table.splitlines()[-1].startswith("1 error")
    data = json.loads(findings_json(findings))
    assert data["errors"] is True and data["counts"]["error"] == 1
    assert data["findings"][0]["code"] == "eagle3-drafter-with-eagle"
    # safetensors files: 8 bytes, then exactly 8 + header length, never the tensors
    weights = [(p, n) for p, n in target.reads if p.endswith(".safetensors")]
    assert weights and all(n is not None for _, n in weights)
    for path, n in weights:
        with open(path, "rb") as f:
            assert n in (8, 8 + header_length(f.read(8)))


async def test_real_target_with_fake_sglang_and_gpus(tmp_path):
    work = write_models(tmp_path / "work")
    site = write_fake_sglang(tmp_path / "site", version="0.5.20")
    bindir = tmp_path / "bin"
    write_fake_nvidia_smi(bindir, [(0, "NVIDIA H200", 143771, 143000), (1, "NVIDIA H200", 143771, 20000)])
    variants = [
        {"name": "baseline"},
        {"name": "good", **SPEC},
        {"name": "auto", "drafter": "draft.yaml", "algorithm": "EAGLE3"},
        {"name": "wrong", **dict(SPEC, algorithm="EAGLE")},
        {"name": "renamed", **SPEC, "extra_args": ["--cuda-graph-max-bs", "8"]},
    ]
    path = write_plan(
        tmp_path / "plan",
        work,
        variants,
        target={"env": {"PYTHONPATH": str(site), "PATH": f"{bindir}:/usr/bin:/bin"}},
    )
    plan = load(path)
    plan.model.tp_size = 2
    findings = await run_checks(plan, LocalTarget())
    assert [f.what for f in _by(findings, code="sglang-version")] == [
        f"SGLang 0.5.20 importable by '{sys.executable}'"
    ]
    assert {(f.variant, f.code) for f in _by(findings, severity="error")} == {
        ("wrong", "eagle3-drafter-with-eagle"),
        ("renamed", "sglang-rejects"),
    }
    renamed = _by(findings, "renamed", "sglang-rejects")[0]
    assert "ambiguous option" in renamed.why and renamed.fix == "spell it --cuda-graph-max-bs-decode"
    assert any("(5, 4, 8)" in f.what for f in _by(findings, "auto", "sglang-auto"))
    busy = _by(findings, code="gpu-busy")
    assert [f.what for f in busy] == ["GPU 1 has 19.5 of 140.4 GiB free"]
    assert not _by(findings, "good", severity="error") and not _by(findings, "good", severity="warning")


async def test_port_and_paths(tmp_path):
    work = write_models(tmp_path / "work")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        path = write_plan(
            tmp_path / "plan",
            work,
            [{"name": "baseline"}, {"name": "good", **SPEC}],
            target={"simulated": True, "launcher": ["{python}", "-m", "harness.sim"]},
            server={"port": port},
        )
        shutil.rmtree(work / "models" / "draft")
        plan = load(path)
        plan.model.path = str(tmp_path / "no-such-model")
        findings = await run_checks(plan, LocalTarget())
    codes = {(f.variant, f.code) for f in _by(findings, severity="error")}
    assert {("", "port-in-use"), ("", "path-missing")} <= codes
    # a relative org/name path that is not under the work directory may be a Hugging Face id
    assert [f.severity for f in _by(findings, "good", "path-missing")] == ["warning"]
    assert not _by(findings, "good", "drafter-unreadable")  # said once, as a missing path


async def test_without_sglang_falls_back_to_tables(tmp_path):
    work = write_models(tmp_path / "work")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bindir / "nvidia-smi").chmod(0o755)
    variants = [
        {"name": "baseline"},
        {"name": "wrong", **dict(SPEC, algorithm="EAGLE")},
        {"name": "old-flag", **SPEC, "extra_args": ["--cuda-graph-max-bs", "8"]},
    ]
    env = {"PYTHONPATH": str(tmp_path / "empty"), "PATH": f"{bindir}:/usr/bin:/bin"}
    plan = load(write_plan(tmp_path / "plan", work, variants, target={"env": env}))
    findings = await run_checks(plan, LocalTarget())
    codes = {(f.variant, f.code) for f in _by(findings, severity="error")}
    assert {("", "sglang-missing"), ("", "gpu-missing"), ("wrong", "eagle3-drafter-with-eagle")} <= codes
    assert _by(findings, code="sglang-version-unknown")
    assert not _by(findings, "old-flag", "flag-renamed")  # unknown version: no version window applies
    pinned = await run_checks(plan, LocalTarget(), versions={"sglang": "0.5.21"})
    assert [f.fix for f in _by(pinned, "old-flag", "flag-renamed")] == ["spell it --cuda-graph-max-bs-decode"]


async def test_unreachable_target(tmp_path):
    class Down(LocalTarget):
        async def connect(self) -> None:
            raise OSError("connection refused")

    plan = prepare_demo(tmp_path)
    findings = await run_checks(plan, Down())
    assert [(f.severity, f.code) for f in findings] == [("error", "target-unreachable")]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> SSHDServer:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.mark.ssh
@pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")
async def test_demo_plan_over_ssh(tmp_path, sshd):
    plan = undeclared_demo(tmp_path)
    plan.target.python = sys.executable
    s = sshd
    target = open_target(
        s.destination,
        ssh_port=s.port,
        known_hosts=s.known_hosts,
        client_keys=[s.client_key],
        config=[s.ssh_config],
    )
    try:
        findings = await run_checks(plan, target)
    finally:
        await target.close()
    errors = {(f.variant, f.code) for f in _by(findings, severity="error")}
    assert errors == {("wrong-flag-eagle", "eagle3-drafter-with-eagle")}
    assert _by(findings, "seed-weak-eagle3", "cuda-graph-disabled")
    assert any("stand-in of SGLang 0.5.15" in f.what for f in _by(findings, code="simulated"))


async def test_simulated_target_whose_python_lacks_draftbench(tmp_path):
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages, no draftbench
    wrapper.chmod(0o755)
    plan = undeclared_demo(tmp_path / "demo")
    plan.target.python = str(wrapper)
    findings = await run_checks(plan, LocalTarget())
    missing = _by(findings, code="stand-in-missing")
    assert [f.severity for f in missing] == ["error"] and "harness" in missing[0].why
    # the drafter/algorithm checks need no interpreter on the target: still reported
    assert _by(findings, "wrong-flag-eagle", "eagle3-drafter-with-eagle")
