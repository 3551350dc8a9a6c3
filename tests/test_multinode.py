"""A plan over several nodes (harness.bench.multinode): variants spread over two loopback sshd targets, each
node measuring its own baseline; a node killed mid-run fails only its variants and `--resume` finishes
them on the node that is left."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.bench.multinode import assign, run_multi
from harness.cli.demo import write_demo_models
from harness.common import events as ev
from harness.common.errors import InputError
from harness.inputs.config import load_plan
from harness.serve.nodes import node_name
from tests.faults_helpers import reap_servers
from tests.sshd import sshd_missing_reason, start_sshd

PLAN = """\
name: two nodes
target:
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_STARTUP_S: "0.1", DRAFTBENCH_SIM_TIME_SCALE: "0.3"}}
targets: {targets}
model: {{path: demo-models/target, tp_size: 1}}
server: {{port: auto, max_running_requests: 16, decode_log_interval: 5, startup_timeout_s: 60}}
variants:
  - name: baseline
  - name: good
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
  - name: weak
    drafter: {{name: weak, path: demo-models/seed-weak-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
  - name: wrong-flag
    drafter: {{name: good2, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    algorithm: EAGLE
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
suites:
  - name: tiny
    prompts:
      - {{id: a, category: code, text: "Write a function that reverses a list."}}
      - {{id: b, category: chat, text: "Tell me about tea."}}
run: {{concurrency: [2], max_tokens: 48, warmup_requests: 0, repeats: 1, phase_sizing: false}}
"""


def _plan(tmp_path: Path, targets: str, workdir: Path | None = None) -> Path:
    workdir = workdir or tmp_path / "work"
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(python=sys.executable, workdir=json.dumps(str(workdir)), targets=targets))
    return path


def test_targets_inherit_the_shared_target_and_variants_are_spread(tmp_path):
    plan = load_plan(_plan(tmp_path, '[node-a, {host: node-b, ssh_port: 2222, python: python3.12}]'))
    a, b = plan.node_targets()
    assert (a.host, a.ssh_port, a.python, a.simulated) == ("node-a", None, sys.executable, True)
    assert (b.host, b.ssh_port, b.python, b.workdir) == ("node-b", 2222, "python3.12", a.workdir)
    assert [node_name(t) for t in (a, b)] == ["node-a", "node-b:2222"]
    # round robin in plan order; the baseline on every node that measures a variant
    assert assign(plan, ["node-a", "node-b:2222"]) == {
        "node-a": ["baseline", "good", "wrong-flag"], "node-b:2222": ["baseline", "weak"]}
    assert assign(plan, ["x", "y", "z", "w"])["w"] == []  # three variants, four nodes: one idles


def test_a_node_listed_twice_is_refused_with_its_line(tmp_path):
    with pytest.raises(InputError) as info:
        load_plan(_plan(tmp_path, "[node-a, node-a]"))
    assert info.value.field and "targets" in info.value.field and "listed twice" in info.value.message


# ---- two real nodes over loopback sshd --------------------------------------------------------------

ssh = pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or "")


@pytest.fixture
def two_nodes(tmp_path, monkeypatch):
    """Two sshd listeners (aliases node-a, node-b) and a HOME whose ~/.ssh/config names both."""
    a = start_sshd(tmp_path / "sshd-a", alias="node-a")
    b = start_sshd(tmp_path / "sshd-b", alias="node-b")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(Path(a.ssh_config).read_text() + "\n"
                                          + Path(b.ssh_config).read_text())
    (home / ".ssh" / "known_hosts").write_text(Path(a.known_hosts).read_text()
                                               + Path(b.known_hosts).read_text())
    monkeypatch.setenv("HOME", str(home))
    write_demo_models(tmp_path / "work")
    yield a, b
    reap_servers(tmp_path)  # a node killed mid-run leaves its stand-in behind on purpose
    a.stop()
    b.stop()


async def _collect(gen, on_event=None) -> list:
    seen = []
    async with contextlib.aclosing(gen) as events:
        async for e in events:
            seen.append(e)
            if on_event is not None:
                await on_event(e)
    return seen


@ssh
@pytest.mark.ssh
@pytest.mark.slow
async def test_two_nodes_each_measure_their_own_baseline(two_nodes, tmp_path):
    plan = load_plan(_plan(tmp_path, "[node-a, node-b]"))
    seen = await asyncio.wait_for(_collect(run_multi(plan, results_dir=tmp_path / "results")), 240)
    done = seen[-1]
    assert isinstance(done, ev.RunDone) and done.complete, done
    run_dir = Path(done.run_dir)
    nodes = json.loads((run_dir / "nodes.json").read_text())["nodes"]
    assert [(n["node"], n["variants"]) for n in nodes] == [
        ("node-a", ["baseline", "good", "wrong-flag"]), ("node-b", ["baseline", "weak"])]
    # both nodes ran at once: node-b's first server started before node-a's last one was stopped
    states = [(e.variant, e.state) for e in seen if isinstance(e, ev.ServerState)]
    assert states.index(("baseline@node-b", "ready")) < states.index(("wrong-flag@node-a", "stopped"))
    s = pd.read_csv(run_dir / "summary.csv")
    assert sorted(zip(s.node, s.variant, strict=True)) == [
        ("node-a", "baseline"), ("node-a", "good"), ("node-a", "wrong-flag"), ("node-b", "baseline"),
        ("node-b", "weak")]
    assert s.hardware.str.contains("simulated").all()
    for node, rows in s.groupby("node"):  # every speedup is against the baseline of the same node
        base = rows[rows.variant == "baseline"].iloc[0]
        for _, row in rows.iterrows():
            assert row.speedup == pytest.approx(row.tok_s / base.tok_s), (node, row.variant)
    dirs = {n["node"]: run_dir / n["dir"] for n in nodes}
    assert dirs["node-b"].parent == run_dir / "nodes"
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "complete"
    # 5 variant-node arms x 2 prompts
    assert done.extra["request_errors"] == 0 and seen[0].total_requests == 5 * 2
    sub = pd.read_csv(dirs["node-b"] / "requests.csv")
    assert set(sub.variant) == {"baseline", "weak"} and sub.ok.all()


@ssh
@pytest.mark.ssh
@pytest.mark.slow
async def test_a_lost_node_fails_only_its_variants_and_resume_moves_them(two_nodes, tmp_path):
    a, b = two_nodes
    plan = load_plan(_plan(tmp_path, "[node-a, node-b]"))

    async def kill_node_b(e):
        if isinstance(e, ev.ServerState) and e.variant == "weak@node-b" and e.state == "ready":
            sessions = b.session_pids()  # the host is gone: no listener, no sessions
            await asyncio.to_thread(b.stop)
            for pid in sessions:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    seen = await asyncio.wait_for(_collect(run_multi(plan, results_dir=tmp_path / "results"), kill_node_b),
                                  300)
    done = seen[-1]
    assert isinstance(done, ev.RunDone) and not done.complete and done.extra["lost_nodes"] == ["node-b"]
    lost = [e for e in seen if isinstance(e, ev.NodeState) and e.state == "lost"]
    assert [e.node for e in lost] == ["node-b"]
    run_dir = Path(done.run_dir)
    s = pd.read_csv(run_dir / "summary.csv")
    a_rows = s[s.node == "node-a"].set_index("variant")
    assert (a_rows.status == "ok").all() and set(a_rows.index) == {"baseline", "good", "wrong-flag"}

    # resume with node-b still down: weak (and the baseline it needs, already measured) runs on node-a
    seen = await asyncio.wait_for(_collect(run_multi(plan, resume_dir=run_dir)), 300)
    done = seen[-1]
    assert done.complete, done
    moved = [e for e in seen if isinstance(e, ev.NodeState) and e.state == "moved"]
    assert [(e.node, e.variants) for e in moved] == [("node-b", ("weak",))]
    nodes = {n["node"]: n for n in json.loads((run_dir / "nodes.json").read_text())["nodes"]}
    assert nodes["node-a"]["variants"][-1] == "weak" and nodes["node-a"]["moved_in"] == [
        {"variant": "weak", "from": "node-b"}]
    s = pd.read_csv(run_dir / "summary.csv")
    weak = s[s.variant == "weak"]
    assert list(weak.node) == ["node-a"] and (weak.status == "ok").all()
    reqs = pd.read_csv(run_dir / nodes["node-a"]["dir"] / "requests.csv")
    # node-a's baseline was not measured again, and weak ran there in full
    assert len(reqs[reqs.variant == "baseline"]) == 2 and reqs[reqs.variant == "weak"].ok.sum() == 2
