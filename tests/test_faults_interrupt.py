"""Interrupting `draftbench run` (Ctrl-C, SIGTERM, the terminal closing): the servers it started are
stopped (unless --keep-servers), finished requests stay on disk, the run is marked incomplete, and
`draftbench run --resume RUN_DIR` finishes it without re-running a finished phase (the one it cut is replayed
whole; its first attempt's rows stay on disk and are left out of every table: harness.analysis.attempts)."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from harness.analysis.summary import read_tables
from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    Cli,
    expected_keys,
    kill_groups,
    last_variant_meta,
    live_groups,
    only_run_dir,
    prompts,
    read_csv,
    reap_servers,
    request_keys,
    sim_env,
    started_pgids,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow

N_PROMPTS = 6
REPEATS = 2
MAX_TOKENS = 96  # a phase takes ~1.5 s: time to interrupt it midway
VARIANTS = ["baseline", "good"]
EXIT_INTERRUPTED = 130


def _plan(tmp_path: Path) -> Path:
    return write_plan(
        tmp_path / "plan.yaml",
        workdir=tmp_path / "work",
        launcher=SIM_LAUNCHER,
        env=sim_env(0.3),
        variants=[{"name": "baseline"}, GOOD],
        suite_prompts=prompts(N_PROMPTS),
        run={"concurrency": [2], "max_tokens": MAX_TOKENS, "repeats": REPEATS},
    )


def _interrupt(
    tmp_path: Path, sig: signal.Signals, *extra: str, close_terminal: bool = False
) -> tuple[Path, int]:
    """Start the run, wait until its first phase is done and a request of the second has finished, then
    send `sig` (with the terminal's pipes closed too when `close_terminal`)."""
    results = tmp_path / "results"
    cli = Cli(["run", str(_plan(tmp_path)), "--results-dir", str(results), *extra], follow=not close_terminal)
    try:
        wait_until(lambda: only_run_dir(results) is not None, 30, "the run directory")
        run_dir = only_run_dir(results)
        assert run_dir is not None
        wait_until(
            lambda: any(r["phase"] == "s@c2#r2" for r in read_csv(run_dir / "requests.csv")),
            60,
            "a request of the second phase to finish",
        )
        cli.proc.send_signal(sig)
        if close_terminal:  # nothing can be printed any more
            assert cli.proc.stdout is not None and cli.proc.stderr is not None
            cli.proc.stdout.close()
            cli.proc.stderr.close()
        rc = cli.proc.wait(60)
    finally:
        cli.kill()
    return run_dir, rc


def _assert_interrupted(run_dir: Path) -> list[dict[str, str]]:
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["status"] == "incomplete"
    rows = read_csv(run_dir / "requests.csv")
    keys = request_keys(rows)
    assert 0 < len(rows) < N_PROMPTS * REPEATS * len(VARIANTS)
    assert len(keys) == len(set(keys)) and set(keys) <= expected_keys(VARIANTS, N_PROMPTS, REPEATS)
    # whole rows only: a request cut by the interrupt is not recorded (resume sends it again)
    assert all(r["ok"] == "True" and int(r["output_tokens"]) == MAX_TOKENS for r in rows)
    assert last_variant_meta(run_dir)["baseline"]["status"] == "interrupted"
    return rows


def _assert_resumes(run_dir: Path, before: list[dict[str, str]]) -> None:
    done = {(p["variant"], p["phase"]) for p in read_csv(run_dir / "phases.csv")}
    cli = Cli(["run", "--resume", str(run_dir)])
    try:
        rc, out, err = cli.finish(timeout=120)
    finally:
        cli.kill()
    assert rc == 0, err[-3000:]
    rows = read_csv(run_dir / "requests.csv")
    assert rows[: len(before)] == before  # appended to, never rewritten
    final = read_tables(run_dir, ("requests.csv",))[0]
    keys = list(zip(final["variant"], final["phase"], final["request_id"], strict=True))
    assert Counter(keys) == Counter(expected_keys(VARIANTS, N_PROMPTS, REPEATS))  # each exactly once
    # what is left out: the rows of the cut phase's first attempt, nothing of a finished phase
    assert len(rows) - len(final) == sum((r["variant"], r["phase"]) not in done for r in before)
    assert all(r["ok"] == "True" for r in rows)
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "complete"
    phases = [(p["variant"], p["phase"]) for p in read_csv(run_dir / "phases.csv")]
    assert Counter(phases) == Counter({(v, f"s@c2#r{r}") for v in VARIANTS for r in range(1, REPEATS + 1)})
    summary = {r["variant"]: r for r in read_csv(run_dir / "summary.csv")}
    assert {v: (summary[v]["status"], int(summary[v]["requests"])) for v in VARIANTS} == {
        v: ("ok", N_PROMPTS * REPEATS) for v in VARIANTS
    }
    assert not {p for ps in started_pgids(run_dir).values() for p in ps} & live_groups()


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_interrupt_stops_servers_and_marks_the_run_incomplete(tmp_path: Path, sig: signal.Signals):
    run_dir, rc = _interrupt(tmp_path, sig)
    assert rc == EXIT_INTERRUPTED
    pgids = started_pgids(run_dir)
    assert list(pgids) == ["baseline"]  # interrupted during the first variant
    assert not set(pgids["baseline"]) & live_groups()
    rows = _assert_interrupted(run_dir)
    if sig == signal.SIGINT:  # the same path for every signal; resuming once is enough
        _assert_resumes(run_dir, rows)


def test_terminal_closed_stops_servers_and_resume_finishes(tmp_path: Path):
    """SIGHUP with the terminal gone (stdout and stderr unwritable): cleanup must not depend on printing."""
    run_dir, rc = _interrupt(tmp_path, signal.SIGHUP, close_terminal=True)
    assert not {p for ps in started_pgids(run_dir).values() for p in ps} & live_groups()
    rows = _assert_interrupted(run_dir)
    _assert_resumes(run_dir, rows)
    assert rc == EXIT_INTERRUPTED  # printing to the closed terminal must not turn into a crash


def test_keep_servers_leaves_them_running(tmp_path: Path):
    run_dir, rc = _interrupt(tmp_path, signal.SIGINT, "--keep-servers")
    pgids = [p for ps in started_pgids(run_dir).values() for p in ps]
    try:
        assert rc == EXIT_INTERRUPTED
        assert pgids and set(pgids) <= live_groups()
        kept = [json.loads(x) for x in (run_dir / "servers.jsonl").read_text().splitlines()]
        assert {e["pgid"] for e in kept if e["state"] == "kept"} == set(pgids)
        _assert_interrupted(run_dir)
    finally:
        kill_groups(pgids)
        wait_until(lambda: not set(pgids) & live_groups(), 10, "the kept servers to go")


def test_harness_killed_outright_then_resume_stops_the_leftover_server(tmp_path: Path):
    """SIGKILL gives the harness no chance to clean up: its server keeps running. `run --resume` must stop
    that left-over server (recorded in servers.jsonl) before it starts its own, then finish the run."""
    run_dir, rc = _interrupt(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    orphans = [p for ps in started_pgids(run_dir).values() for p in ps]
    assert orphans and set(orphans) & live_groups()  # the server outlived its harness
    before = read_csv(run_dir / "requests.csv")
    _assert_resumes(run_dir, before)  # also asserts that no started process group is left
    reaped = [json.loads(x) for x in (run_dir / "servers.jsonl").read_text().splitlines()]
    assert any(e.get("by") == "resume" and e["pgid"] in orphans and e["state"] == "stopped" for e in reaped)
