"""The TUI against the real core on the stand-in: a TUI run and a CLI run of the same plan write the same
summary.csv, and a whole session (servers, run, results) works over SSH through the loopback sshd."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.summary import load_summary
from harness.inputs.config import REPO_ROOT
from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.screens.run import RunScreen
from tests.faults_helpers import reap_servers
from tests.snapshots.tui_fakes import Recorder, wait_for
from tests.sshd import SSHDServer, sshd_missing_reason, start_sshd

pytestmark = pytest.mark.slow
SIZE = (120, 40)
# Columns that are measured time (or computed from it) differ between two runs of one plan by noise only.
TIMING = {
    "tok_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "itl_p50_ms",
    "speedup",
    "break_even_accept_len",
    "decode_tok_s",
    "step_ms",
    "e2e_p50_ms",
    "ttft_mean_ms",
    "server_ttft_mean_ms",
    "server_queue_mean_ms",
    "step_ms_ratio",  # from the measured step times, like step_ms
    "verify_step_ms",
    "decode_step_ms",
    "decode_step_speedup",  # accept len x decode step / verify step
    "ttft_cost_ms",
    "mean_in_flight",
    "steady_s",
    "steady_tok_s",
    "speedup_ci_low",
    "speedup_ci_high",
    # the decode-log windows' accept length: which requests share a window (and so its mean) follows timing;
    # the per-request accept length (accept_len) stays exact
    "accept_len_log",
    "accept_rate_log",
}
# comparisons of timing columns (the verdict and its reason quote the interval; with repeats, the interval's
# method says whether they differ beyond their prompts' noise)
FROM_TIMING = {"slower_than_baseline", "verdict", "verdict_reason", "too_short", "accept_sources_agree",
               "ci_method"}
# Two runs of the stand-in on a busy 2-core CI box differ by noise; a broken pipeline (units, swapped or
# missing columns) is off by far more than this.
REL_TOL = 0.5
ABS_TOL = {"ttft_p50_ms": 25.0, "ttft_p90_ms": 25.0, "ttft_mean_ms": 25.0, "server_ttft_mean_ms": 25.0,
           "server_queue_mean_ms": 25.0, "ttft_cost_ms": 25.0, "itl_p50_ms": 5.0, "e2e_p50_ms": 50.0,
           "step_ms": 5.0}
# Each percentile of the TUI-vs-CLI comparison is over 4 x 5 requests per variant: a TTFT is a few ms of
# modelled prefill plus however long a busy machine keeps the stand-in waiting, and over the 5 requests of
# one pass (the p90 is about their largest) two runs side by side still differed by 25-40 ms under load
REPEATS = 4
POLL_S = 0.2  # while a run measures, the test polls the UI gently: the CPU is shared with the stand-in


def write_plan(tmp_path: Path, *, host: str = "local", max_tokens: int = 32, time_scale: float = 0.3,
               repeats: int = 1) -> Path:
    """The demo plan cut to baseline + one drafter on the smoke suite, seeded (same accept lengths every
    run at concurrency 1), the stand-in sped up."""
    from harness.cli.demo import write_demo_models

    workdir = tmp_path / "target"
    write_demo_models(workdir)
    plan = yaml.safe_load((REPO_ROOT / "plans" / "demo.yaml").read_text())
    plan["target"].update(
        host=host,
        workdir=str(workdir),
        python=sys.executable,
        env={"DRAFTBENCH_SIM_TIME_SCALE": str(time_scale), "DRAFTBENCH_SIM_STARTUP_S": "0.2"},
    )
    plan["model"]["extra_args"] = ["--random-seed", "1234"]
    plan["variants"] = plan["variants"][:2]
    # one pass per phase and a fixed design: the test counts requests and compares two runs row by row
    plan["run"].update(concurrency=[1], max_tokens=max_tokens, warmup_requests=1, phase_sizing=False,
                       stop="fixed", repeats=repeats)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


async def tui_run(plan_path: Path, results_dir: Path, alongside: Callable[[], object] | None = None,
                  **kwargs) -> tuple[str, Recorder, object]:
    """A run from the TUI's Run section; `alongside` is called as the run is started."""
    app = build_app(str(plan_path), results_dir, gpu_poll_s=0, section="run", **kwargs)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded", 60)
        await pilot.press("ctrl+r")
        if alongside is not None:
            alongside()
        await wait_for(pilot, lambda: app.run_state in ("done", "failed"), "the run finished", 180, POLL_S)
        assert app.run_state == "done", app.run_status
        await wait_for(pilot, lambda: app.result is not None, "its results loaded")
    return rec.of(msg.RunFinished)[0].run_dir, rec, app


def assert_same_summary(a: pd.DataFrame, b: pd.DataFrame) -> None:
    keys = ["variant", "concurrency"]
    a, b = a.sort_values(keys).reset_index(drop=True), b.sort_values(keys).reset_index(drop=True)
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        if col in FROM_TIMING:
            continue
        if col in TIMING:
            x, y = pd.to_numeric(a[col], errors="coerce"), pd.to_numeric(b[col], errors="coerce")
            assert (x.isna() == y.isna()).all(), col
            both = x.notna()
            tol = (REL_TOL * y[both].abs()).clip(lower=ABS_TOL.get(col, 0.0))
            assert ((x[both] - y[both]).abs() <= tol).all(), (col, list(x), list(y))
        else:
            pd.testing.assert_series_equal(a[col], b[col], check_names=True, obj=col)


def test_a_tui_run_and_a_cli_run_write_the_same_summary(tmp_path):
    """The two runs go side by side, the CLI's started as the TUI's is, so that each does the same work at
    the same time on a machine as busy for both. One after the other, the TUI's run alone had the TUI
    drawing next to it, and on a loaded 2-core machine its TTFTs came out 20-40 ms above the CLI run's.
    Each has its own copy of the plan's workdir, so that neither run sees the other's servers there (the TUI
    lists the workdir's servers, and a run may adopt one)."""
    plans = {side: write_plan(tmp_path / side, repeats=REPEATS) for side in ("cli", "tui")}
    procs: list[subprocess.Popen] = []
    log = tmp_path / "cli.log"

    def start_cli() -> None:
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "harness.cli", "run", str(plans["cli"]), "--results-dir",
                 str(tmp_path / "cli" / "results")], cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT))

    try:
        tui_dir, rec, app = asyncio.run(tui_run(plans["tui"], tmp_path / "tui" / "results",
                                                alongside=start_cli))
        assert procs[0].wait(180) == 0, log.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()  # the CLI stops its servers on SIGTERM
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        reap_servers(tmp_path / "cli")
    (cli_dir,) = [p for p in (tmp_path / "cli" / "results").iterdir() if p.is_dir()]
    cli, tui = load_summary(cli_dir), load_summary(tui_dir)
    assert len(tui) == 2 and set(tui["status"]) == {"ok"}
    assert tui.set_index("variant").loc["good-eagle3", "accept_len"] > 1.5
    assert_same_summary(tui, cli)
    # what the TUI shows is that file
    assert len(app.result.summary) == len(tui) and app.result.info.run_dir == tui_dir
    last = rec.of(msg.ProgressUpdated)[-1].snapshot
    assert last.done == last.total == 10 * REPEATS


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> SSHDServer:
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.mark.ssh
def test_a_whole_tui_session_over_ssh(sshd, tmp_path):
    """Servers: start and stop one; Run: a narrowed run from the form; Results: its table. All over SSH."""
    from harness.targets import open_target

    plan = write_plan(tmp_path, host=sshd.alias, max_tokens=16, time_scale=0.1)  # no timing compared here

    # picklable: the run's own process opens its connection with it
    target_factory = functools.partial(open_target, sshd.alias, config=[sshd.ssh_config])

    async def session() -> tuple[object, Recorder]:
        app = build_app(str(plan), tmp_path / "results", gpu_poll_s=0, target_factory=target_factory)
        rec = Recorder()
        async with app.run_test(size=SIZE, message_hook=rec) as pilot:
            await wait_for(pilot, lambda: app.plan is not None and app.fleet is not None, "plan loaded", 60)
            await pilot.press("s")
            await wait_for(
                pilot, lambda: app.servers["baseline"].state in ("ready", "failed"), "baseline up", 90
            )
            assert app.servers["baseline"].state == "ready", app.servers["baseline"].detail
            await wait_for(
                pilot,
                lambda: any("fired up" in ln for ln in app.log_buffers["baseline"]),
                "its log over ssh",
                30,
            )
            await pilot.press("x")
            await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "baseline stopped", 60)

            await pilot.press("2")
            screen = app.screen
            assert isinstance(screen, RunScreen)
            screen.query_one("#concurrency").value = "1"
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.run_state in ("done", "failed"), "run finished", 180, POLL_S)
            assert app.run_state == "done", app.run_status
            await wait_for(pilot, lambda: app.result is not None, "its results loaded")
            await pilot.press("3")
            table = app.screen.query_one("#results-table")
            await wait_for(pilot, lambda: table.row_count == 2, "results table", 30)
        return app, rec

    app, rec = asyncio.run(session())
    run_dir = rec.of(msg.RunFinished)[0].run_dir
    summary = load_summary(run_dir)
    assert sorted(summary["variant"]) == ["baseline", "good-eagle3"] and set(summary["status"]) == {"ok"}
    assert {v.state for v in app.servers.values()} == {"stopped"}
    states = [(m.variant, m.state, m.source) for m in rec.of(msg.ServerStateChanged)]
    assert ("baseline", "ready", "fleet") in states and ("baseline", "ready", "run") in states
    assert states.index(("baseline", "stopped", "fleet")) < states.index(("baseline", "ready", "run"))
    assert (Path(run_dir) / "logs" / "good-eagle3.log").read_text().count("Decode batch") > 0
