"""An existing endpoint on an SSH target: the servers run on the node (here: stand-ins behind a loopback
sshd), the plan names their addresses as the node sees them, and draftbench reaches them through the SSH
target's own port forward, measures them and never stops them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from harness.targets.ssh import SSHTarget
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, prompts, read_csv, sim_env, write_plan
from tests.sshd import sshd_missing_reason, start_sshd
from tests.workload_helpers import _status, spec_flags, start_stand_in, stop_stand_in, write_models

pytestmark = [pytest.mark.ssh, pytest.mark.slow,
              pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")]


@pytest.fixture
def node(tmp_path, monkeypatch):
    sshd = start_sshd(tmp_path / "sshd", alias="gpu-node")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(Path(sshd.ssh_config).read_text())
    (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
    monkeypatch.setenv("HOME", str(home))
    root = write_models(tmp_path / "models")
    base = start_stand_in(root, "baseline")
    spec = start_stand_in(root, "eagle3", *spec_flags(root))
    yield sshd, base, spec
    stop_stand_in(base)
    stop_stand_in(spec)
    sshd.stop()


async def test_existing_endpoints_on_an_ssh_target_go_through_its_forward(node, tmp_path, monkeypatch):
    sshd, base, spec = node
    forwarded: list[tuple[str, int, int]] = []
    real_forward = SSHTarget.forward

    async def spy(self, host, port):
        local = await real_forward(self, host, port)
        forwarded.append((host, port, local[1]))
        return local

    monkeypatch.setattr(SSHTarget, "forward", spy)
    variants = [{"name": "baseline", "endpoint": base.url},
                {"name": "eagle3", "endpoint": spec.url, "baseline": False}]
    path = write_plan(tmp_path / "plan.yaml", host="gpu-node", workdir=tmp_path / "work",
                      launcher=SIM_LAUNCHER, env=sim_env(), variants=variants, suite_prompts=prompts(3),
                      run={"concurrency": [2], "max_tokens": 8, "repeats": 1})
    rc = await consume(run_plan(load_plan(path), results_dir=tmp_path / "results"), out=io.StringIO())
    assert rc == 0
    run_dir = only_run_dir(tmp_path / "results")
    ports = {int(u.rsplit(":", 1)[1]) for u in (base.url, spec.url)}
    # each endpoint was reached through a local port of the SSH target's forward, never directly
    assert {(h, p) for h, p, _ in forwarded} == {("127.0.0.1", p) for p in ports}
    assert all(local not in ports for _, _, local in forwarded)
    rows = read_csv(run_dir / "requests.csv")
    assert len(rows) == 6 and all(r["ok"] == "True" for r in rows)
    meta = {json.loads(x)["variant"]: json.loads(x)
            for x in (run_dir / "variants.jsonl").read_text().splitlines()}
    assert meta["eagle3"]["started_by_draftbench"] is False and meta["eagle3"]["algorithm"] == "EAGLE3"
    entries = [json.loads(x) for x in (run_dir / "servers.jsonl").read_text().splitlines()]
    assert {e["state"] for e in entries} == {"existing"} and {e["target"] for e in entries} == {"gpu-node"}
    assert base.proc.poll() is None and spec.proc.poll() is None and _status(spec.url + "/health") == 200
