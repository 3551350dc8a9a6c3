"""Security of a run: no passwords in plans, a private work directory on the target, and no secret of the
plan (API keys, tokens in target.env or in launch flags) anywhere in the run directory, logs included.
Host-key checking is proven in test_target_ssh.py (unknown host refused with its fingerprint)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.analysis.rundir import REDACTED
from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common.errors import InputError
from harness.inputs.config import load_plan
from tests.faults_helpers import FAULTY_LAUNCHER, only_run_dir, prompts, read_csv, reap_servers, write_plan

API_KEY = "sk-draftbench-test-0123456789abcdef"
HF_TOKEN = "hf_draftbenchTestToken0123456789"
FLAG_KEY = "flag-secret-9876543210"

MINIMAL = """\
name: x
target:
  host: gpu-node
{extra}model: {{path: m}}
variants: [{{name: baseline}}]
suites: [{{name: s, prompts: [{{id: a, text: hi}}]}}]
"""


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


@pytest.mark.parametrize(
    "extra, field",
    [
        ("  password: hunter2\n", "target.password"),
        ("  ssh_password: hunter2\n", "target.ssh_password"),
        ("  passphrase: hunter2\n", "target.passphrase"),
        ("password: hunter2\n", "password"),
    ],
)
def test_plans_cannot_carry_passwords(tmp_path: Path, extra: str, field: str):
    """SSH auth is by key or agent only: there is no field for a password, and an unknown one is an error
    located at its line (the value is never echoed)."""
    path = tmp_path / "plan.yaml"
    path.write_text(MINIMAL.format(extra=extra))
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert info.value.field == field
    assert info.value.line == MINIMAL.format(extra=extra).splitlines().index(extra.rstrip("\n")) + 1
    assert "hunter2" not in str(info.value)


@pytest.mark.slow
async def test_secrets_never_reach_the_run_directory(tmp_path: Path):
    workdir = tmp_path / "target"
    workdir.mkdir(mode=0o755)  # an existing, world-readable work directory is made private
    env = {
        "OPENAI_API_KEY": API_KEY,
        "HF_TOKEN": HF_TOKEN,
        "TOKENIZERS_PARALLELISM": "false",
        "FAULTY_ECHO_ENV": "OPENAI_API_KEY,HF_TOKEN,TOKENIZERS_PARALLELISM",
    }
    plan_path = write_plan(
        tmp_path / "plan.yaml",
        workdir=workdir,
        launcher=FAULTY_LAUNCHER,
        sim=False,
        env=env,
        variants=[{"name": "baseline", "extra_args": [f"--admin-api-key={FLAG_KEY}"]}],
        suite_prompts=prompts(2),
        run={"concurrency": [2], "max_tokens": 4},
    )
    plan = load_plan(plan_path)
    plan.model.extra_args = ["--api-key", API_KEY]
    assert await consume(run_plan(plan, results_dir=tmp_path / "results"), out=io.StringIO()) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None and all(r["ok"] == "True" for r in read_csv(run_dir / "requests.csv"))

    # the server got every secret and logged them all (so there was something to leak) ...
    remote_log = (workdir / "runs" / run_dir.name / "baseline.log").read_text()
    assert all(secret in remote_log for secret in (API_KEY, HF_TOKEN, FLAG_KEY))
    # ... and not one byte of them is in the run directory
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {
        "plan.resolved.json",
        "provenance.json",
        "variants.jsonl",
        "servers.jsonl",
        "requests.csv",
        "summary.csv",
        "baseline.log",
    }
    for path in files:
        data = path.read_bytes()
        for secret in (API_KEY, HF_TOKEN, FLAG_KEY):
            assert secret.encode() not in data, f"{secret[:6]}... leaked into {path.relative_to(run_dir)}"

    # redacted where they were, ordinary values kept
    resolved = json.loads((run_dir / "plan.resolved.json").read_text())
    assert resolved["target"]["env"] == {**env, "OPENAI_API_KEY": REDACTED, "HF_TOKEN": REDACTED}
    assert resolved["model"]["extra_args"] == ["--api-key", REDACTED]
    assert resolved["variants"][0]["extra_args"] == [f"--admin-api-key={REDACTED}"]
    log = (run_dir / "logs" / "baseline.log").read_text()
    assert f"OPENAI_API_KEY={REDACTED}" in log and "TOKENIZERS_PARALLELISM=false" in log

    # the work directory and the run's directory on the target are private (0700)
    assert (workdir.stat().st_mode & 0o777) == 0o700
    assert ((workdir / "runs" / run_dir.name).stat().st_mode & 0o777) == 0o700
