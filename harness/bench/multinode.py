"""A plan with several targets: variants spread over the nodes and measured at once, one server per node
at a time, every node measuring its own baseline (speedups only ever compare runs on the same node).

Each node's share runs as an ordinary `run_plan` into `<run>/nodes/<node>/`; this module only assigns
variants, runs the nodes concurrently, tags their events with the node, and merges their summaries
(`harness.analysis.nodes`). A node lost mid-run (an SSH drop beyond reconnection, a host down) fails only
its own variants; `--resume` finishes them there when the node is back, or on another node otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.nodes import NODES_DIR, NODES_FILE, variant_ok
from harness.analysis.rundir import leftover_servers, new_run_dir, redact_plan, write_json
from harness.analysis.summary import summarise_run
from harness.bench.conversation import requests_per_pass
from harness.bench.lock import RunDirLock
from harness.bench.runner import run_plan
from harness.common import events as ev
from harness.common.aio import drain
from harness.serve.nodes import node_name, sub_plan, tag_node
from harness.targets import open_target

if TYPE_CHECKING:
    from harness.common.aio import Emit
    from harness.inputs.config import Plan
    from harness.inputs.plan_parts import Target as TargetSpec
    from harness.targets.base import Target

    Opener = Callable[..., Target]  # open_target's signature: (host, *, ssh_port=...) -> Target

REACH_TIMEOUT_S = 30.0


def node_slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _baselines_for(plan: Plan, names: list[str]) -> list[str]:
    """The baselines the given speculative variants are compared with (one per engine in use)."""
    out: list[str] = []
    for v in plan.variants:
        if v.name in names:
            base = plan.baseline_of(v)
            if base.name not in out:
                out.append(base.name)
    return out or [plan.baseline.name]


def assign(plan: Plan, nodes: list[str]) -> dict[str, list[str]]:
    """Speculative variants round-robin over the nodes in plan order; each node that measures anything
    gets the baselines those variants need. A node with nothing to measure gets nothing."""
    share: dict[str, list[str]] = {n: [] for n in nodes}
    spec = [v.name for v in plan.variants if not v.is_baseline]
    for i, name in enumerate(spec):
        share[nodes[i % len(nodes)]].append(name)
    if not spec:  # only baselines: the first node measures them
        share[nodes[0]] = [v.name for v in plan.variants]
        return share
    return {n: (_baselines_for(plan, names) + names if names else []) for n, names in share.items()}


async def _reachable(target: TargetSpec, opener: Opener) -> bool:
    t = opener(target.host, ssh_port=target.ssh_port)
    try:
        await asyncio.wait_for(t.connect(), REACH_TIMEOUT_S)
        res = await asyncio.wait_for(t.run(["true"], timeout=20), REACH_TIMEOUT_S)
        return res.rc == 0
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await t.close()


async def run_multi(plan: Plan, *, results_dir: str | Path = "results", keep_servers: bool = False,
                    resume_dir: str | Path | None = None, opener: Opener | None = None) -> AsyncIterator[Any]:
    """Run a plan over all its nodes; yields harness.common.events (variants named `variant@node`).
    Closing the generator stops every node's servers."""
    def start(emit: Emit) -> Awaitable[None]:
        return _Multi(plan, Path(results_dir), keep_servers, Path(resume_dir) if resume_dir else None,
                      opener, emit).main()

    async with contextlib.aclosing(drain(start, name="draftbench-multinode")) as events:
        async for event in events:
            yield event


class _Multi:
    def __init__(self, plan: Plan, results_dir: Path, keep: bool, resume_dir: Path | None,
                 opener: Opener | None, emit: Emit):
        self.plan, self.results_dir, self.keep, self.resume_dir = plan, results_dir, keep, resume_dir
        self.opener, self.emit = opener or open_target, emit
        self.targets = {node_name(t): t for t in plan.node_targets()}
        self.done = 0
        self.total = 0
        self.unreachable: set[str] = set()

    def _load_state(self) -> dict[str, Any]:
        if self.resume_dir is not None:
            self.run_dir = self.resume_dir
            return json.loads((self.run_dir / NODES_FILE).read_text(encoding="utf-8"))
        run_id, self.run_dir = new_run_dir(self.results_dir, self.plan.name)
        share = assign(self.plan, list(self.targets))
        # a node's directory name is its run id on the target too (logs under <workdir>/runs/<it>): unique
        return {"nodes": [{"node": n, "dir": f"{NODES_DIR}/{run_id}@{node_slug(n)}", "variants": names,
                           "moved_in": []}
                          for n, names in share.items()]}

    async def _move_from_lost_nodes(self, state: dict[str, Any]) -> None:
        """On resume: a node that cannot be reached hands its unfinished variants to a reachable one."""
        entries = state["nodes"]
        reach = {e["node"]: await _reachable(self.targets[e["node"]], self.opener)
                 for e in entries if e["node"] in self.targets}
        alive = [e for e in entries if reach.get(e["node"])]
        self.unreachable = {n for n, ok in reach.items() if not ok}
        byname = {v.name: v for v in self.plan.variants}
        for e in entries:
            unfinished = [v for v in e["variants"] if not variant_ok(self.run_dir / e["dir"], v)]
            if reach.get(e["node"]) or not unfinished or not alive:
                continue
            spec = [v for v in unfinished if not byname[v].is_baseline]
            to = min(alive, key=lambda a: len(a["variants"]))
            for name in spec:
                e["variants"].remove(name)
                for base in _baselines_for(self.plan, [name]):
                    if base not in to["variants"]:
                        to["variants"].insert(0, base)
                to["variants"].append(name)
                to.setdefault("moved_in", []).append({"variant": name, "from": e["node"]})
            self.emit(ev.NodeState(e["node"], "moved", tuple(spec),
                                   f"unreachable; {', '.join(spec)} resumed on {to['node']}"))

    async def main(self) -> None:
        state = self._load_state()
        with RunDirLock(self.run_dir):  # a second run of this directory stops here, having touched nothing
            await self._main(state)

    async def _main(self, state: dict[str, Any]) -> None:
        if self.resume_dir is not None:
            await self._move_from_lost_nodes(state)
        write_json(self.run_dir / NODES_FILE, state)
        if self.resume_dir is None or not (self.run_dir / "plan.resolved.json").exists():  # a resume keeps it
            write_json(self.run_dir / "plan.resolved.json", redact_plan(self.plan.resolved_dict()))
        write_json(self.run_dir / "provenance.json", {
            "run_id": self.run_dir.name, "plan": self.plan.name, "status": "running",
            "plan_file": str(Path(self.plan.source_path or "").resolve()),
            "target_workdir": str(self.plan.target.workdir), "simulated": bool(self.plan.target.simulated),
            "nodes": [e["node"] for e in state["nodes"]]})
        per_variant = requests_per_pass(self.plan) * int(self.plan.run.repeats or 1)
        self.total = per_variant * sum(len(e["variants"]) for e in state["nodes"])
        names = tuple(f"{v}@{e['node']}" for e in state["nodes"] for v in e["variants"])
        self.emit(ev.RunStarted(self.run_dir.name, str(self.run_dir), self.plan.name, names, self.total,
                                bool(self.plan.target.simulated)))
        results: dict[str, ev.RunDone | None] = {}
        try:
            await asyncio.gather(*(self._node(e, results) for e in state["nodes"] if self._has_work(e)))
        finally:
            summary = ""
            with contextlib.suppress(Exception):
                summary = str(summarise_run(self.run_dir))  # each node's summary, stacked
        lost = [n for n, r in results.items() if r is None]
        failures = sum(r.failures for r in results.values() if r is not None) + len(lost)
        prov = json.loads((self.run_dir / "provenance.json").read_text(encoding="utf-8"))
        write_json(self.run_dir / "provenance.json",
                   {**prov, "status": "complete" if failures == 0 else "incomplete",
                                                      "lost_nodes": lost})
        errors = sum(int(r.extra.get("request_errors", 0)) for r in results.values() if r is not None)
        self.emit(ev.RunDone(str(self.run_dir), failures == 0, failures, summary,
                             {"request_errors": errors, "lost_nodes": lost}))

    def _has_work(self, entry: dict[str, Any]) -> bool:
        """A node runs when a variant of its share is unfinished, or (on resume) when servers an earlier,
        interrupted run left there must be stopped."""
        node_dir = self.run_dir / entry["dir"]
        if any(not variant_ok(node_dir, v) for v in entry["variants"]):
            return True
        return self.resume_dir is not None and bool(leftover_servers(node_dir / "servers.jsonl")) \
            and entry["node"] not in self.unreachable

    async def _node(self, entry: dict[str, Any], results: dict[str, ev.RunDone | None]) -> None:
        name = entry["node"]
        node_dir = self.run_dir / entry["dir"]
        node_dir.mkdir(parents=True, exist_ok=True)
        sub = sub_plan(self.plan, self.targets[name], entry["variants"])
        results[name] = None
        self.emit(ev.NodeState(name, "running", tuple(entry["variants"])))
        try:
            async with contextlib.aclosing(run_plan(sub, results_dir=node_dir.parent, keep_servers=self.keep,
                                                    resume_dir=node_dir)) as events:
                async for e in events:
                    if isinstance(e, ev.RunStarted):
                        continue
                    if isinstance(e, ev.RunDone):
                        results[name] = e
                        continue
                    if isinstance(e, ev.RequestDone):
                        self.done += 1
                        e = dataclasses.replace(e, done=self.done, total=self.total)
                    self.emit(tag_node(e, name))
            self.emit(ev.NodeState(name, "done", tuple(entry["variants"])))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # this node is gone; the others go on
            self.emit(ev.NodeState(name, "lost", tuple(entry["variants"]), f"{type(exc).__name__}: {exc}"))
