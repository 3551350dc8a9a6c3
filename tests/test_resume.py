"""A resumed run tells the same story as an uninterrupted one (`draftbench run` as a subprocess on the
stand-in): killed at random points (SIGINT or SIGKILL) and resumed, a SIGINT between a phase's last
record and its phase row, a server killed mid-phase, an edited plan, two resumes of one directory at once.

Figures are compared with an uninterrupted run of the same plan: requests, errors and output tokens
exactly, phases.csv's rows (one per phase, every prompt in it) exactly, tok/s within TOK_S_TOLERANCE: a
rerun phase is another sample of the same measurement, so it agrees within the run-to-run noise (7 % on
this stand-in plan; the speedup intervals the verdicts compute at c1 are narrower than that, which is why
they are not the yardstick here), while a remainder measured alone is off by up to the concurrency.
`DRAFTBENCH_RESUME_KILLS=N` runs N random kill points instead of KILLS (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    Cli,
    live_groups,
    only_run_dir,
    prompts,
    read_csv,
    read_jsonl,
    reap_servers,
    run_dir_from,
    sim_env,
    started_pgids,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow

N_PROMPTS = 6
CONCURRENCY = [1, 2]
REPEATS = 2
VARIANTS = ["baseline", "good"]
TOTAL = N_PROMPTS * len(CONCURRENCY) * REPEATS * len(VARIANTS)
KILLS = 4
TOK_S_TOLERANCE = 0.3
EXIT_BAD_INPUT = 2


def _plan(root: Path, **run: object) -> Path:
    return write_plan(
        root / "plan.yaml",
        workdir=root / "work",
        launcher=SIM_LAUNCHER,
        env=sim_env(0.3),
        variants=[{"name": "baseline"}, GOOD],
        suite_prompts=prompts(N_PROMPTS),
        run={"concurrency": CONCURRENCY, "max_tokens": 64, "repeats": REPEATS, **run},
    )


def _cli(*args: str, timeout: float = 180) -> tuple[int, str, str]:
    cli = Cli(list(args))
    try:
        return cli.finish(timeout=timeout)
    finally:
        cli.kill()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of the plan: what every resumed run must equal."""
    root = tmp_path_factory.mktemp("reference")
    try:
        rc, out, err = _cli("run", str(_plan(root)), "--results-dir", str(root / "results"))
    finally:
        reap_servers(root)
    assert rc == 0, err[-3000:]
    return run_dir_from(out)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of a finished run directory, under the same name, to break and resume."""
    dest = tmp_path / "results" / run_dir.name
    shutil.copytree(run_dir, dest)
    return dest


def _summary(run_dir: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["variant"], r["concurrency"]): r for r in read_csv(run_dir / "summary.csv")}


def assert_same_figures(run_dir: Path, reference: Path) -> None:
    """The resumed run's summary equals the uninterrupted one's: counts exactly, tok/s within the noise."""
    got, want = _summary(run_dir), _summary(reference)
    assert got.keys() == want.keys()
    for key, ref in want.items():
        row = got[key]
        exact = ("requests", "errors", "output_tokens", "status")
        assert {c: row[c] for c in exact} == {c: ref[c] for c in exact}, key
        ratio = float(row["tok_s"]) / float(ref["tok_s"])
        assert abs(ratio - 1) <= TOK_S_TOLERANCE, (key, row["tok_s"], ref["tok_s"])
    phases = read_csv(run_dir / "phases.csv")
    assert Counter((p["variant"], p["phase"]) for p in phases) == Counter(
        (p["variant"], p["phase"]) for p in read_csv(reference / "phases.csv"))  # one row per phase
    assert {int(p["requests"]) for p in phases} == {N_PROMPTS}  # each over every prompt, never a remainder
    assert json.loads((run_dir / "provenance.json").read_text())["status"] == "complete"


def _drop_phase_rows(run_dir: Path, keep: int) -> list[dict[str, str]]:
    """phases.csv cut to its first `keep` rows, as if the run had been stopped after the last record of
    the phase that follows but before its row; the cut variants end "interrupted" as a SIGINT leaves them."""
    path = run_dir / "phases.csv"
    lines = path.read_text().splitlines(keepends=True)
    dropped = read_csv(path)[keep:]
    path.write_text("".join(lines[: keep + 1]))
    with open(run_dir / "variants.jsonl", "a") as fh:
        for name in dict.fromkeys(p["variant"] for p in dropped):
            fh.write(json.dumps({"variant": name, "status": "interrupted"}) + "\n")
    prov = json.loads((run_dir / "provenance.json").read_text())
    (run_dir / "provenance.json").write_text(json.dumps({**prov, "status": "incomplete"}))
    return dropped


# ---- 1. killed at random points, then resumed -------------------------------------------------------------


def _kill_points() -> list[tuple[signal.Signals, int]]:
    n = int(os.environ.get("DRAFTBENCH_RESUME_KILLS", KILLS))
    rng = random.Random(26)
    return [(signal.SIGINT if i % 2 == 0 else signal.SIGKILL, rng.randrange(1, TOTAL)) for i in range(n)]


@pytest.mark.parametrize("sig,after", _kill_points(),
                         ids=lambda v: v.name if isinstance(v, signal.Signals) else str(v))
def test_killed_at_a_random_point_then_resumed_equals_an_uninterrupted_run(
    tmp_path: Path, reference: Path, sig: signal.Signals, after: int
):
    results = tmp_path / "results"
    cli = Cli(["run", str(_plan(tmp_path)), "--results-dir", str(results)])
    try:
        wait_until(lambda: only_run_dir(results) is not None, 60, "the run directory")
        run_dir = only_run_dir(results)
        assert run_dir is not None
        wait_until(lambda: len(read_csv(run_dir / "requests.csv")) >= after, 120, f"{after} records")
        cli.proc.send_signal(sig)
        cli.proc.wait(60)
    finally:
        cli.kill()
    rc, _, err = _cli("run", "--resume", str(run_dir))
    assert rc == 0, err[-3000:]
    assert_same_figures(run_dir, reference)
    assert not {p for ps in started_pgids(run_dir).values() for p in ps} & live_groups()


# ---- 2. a SIGINT between a phase's last record and its phase row ---------------------------------------


def test_a_phase_without_its_row_is_rerun_not_taken_as_done(tmp_path: Path, reference: Path):
    run_dir = _copy(reference, tmp_path)
    dropped = _drop_phase_rows(run_dir, keep=len(read_csv(run_dir / "phases.csv")) - 1)
    assert [(p["variant"], p["phase"]) for p in dropped] == [("good", "s@c2#r2")]
    before = len(read_csv(run_dir / "requests.csv"))
    rc, _, err = _cli("run", "--resume", str(run_dir))
    assert rc == 0, err[-3000:]
    rows = read_csv(run_dir / "requests.csv")
    assert len(rows) == before + N_PROMPTS  # the phase replayed whole; its first attempt's rows stay on disk
    assert_same_figures(run_dir, reference)  # ...but count once


def test_a_resume_keeps_the_run_s_start_and_says_a_changed_engine(tmp_path: Path, reference: Path):
    """provenance.json keeps when, where and with what the run started; each resume is added to `resumes`.
    On the H200 a resume rewrote started_at with the resume's time. An engine whose version changed between
    the start and the resume is said: the rows on either side come from different engines."""
    run_dir = _copy(reference, tmp_path)
    _drop_phase_rows(run_dir, keep=len(read_csv(run_dir / "phases.csv")) - 1)
    prov = json.loads((run_dir / "provenance.json").read_text())
    first = {**prov, "started_at": "2026-01-02T03:04:05+0000", "client_host": "first-host",
             "engine_versions": {**prov["engine_versions"], "sglang": "0.5.9"}}
    (run_dir / "provenance.json").write_text(json.dumps(first))
    rc, out, err = _cli("run", "--resume", str(run_dir))
    assert rc == 0, err[-3000:]
    after = json.loads((run_dir / "provenance.json").read_text())
    assert {k: after[k] for k in ("started_at", "client_host", "engine_versions")} == {
        "started_at": "2026-01-02T03:04:05+0000", "client_host": "first-host",
        "engine_versions": first["engine_versions"]}
    assert after["status"] == "complete"
    [resume] = after["resumes"]
    assert resume["engine_versions"] == prov["engine_versions"]
    assert resume["started_at"] != first["started_at"]
    assert f"sglang 0.5.9 -> {prov['engine_versions']['sglang']}" in out + err


# ---- 3. a server killed mid-phase: the redone requests' errors do not count ----------------------------


def test_errors_of_a_redone_phase_do_not_count(tmp_path: Path, reference: Path):
    results = tmp_path / "results"
    cli = Cli(["run", str(_plan(tmp_path)), "--results-dir", str(results)])
    try:
        wait_until(lambda: only_run_dir(results) is not None, 60, "the run directory")
        run_dir = only_run_dir(results)
        assert run_dir is not None
        wait_until(lambda: any(r["variant"] == "good" and r["phase"] == "s@c2#r1"
                               for r in read_csv(run_dir / "requests.csv")), 120, "good's c2 phase under way")
        pgid = started_pgids(run_dir)["good"][0]
        os.killpg(pgid, signal.SIGKILL)  # requests in flight end in errors; the variant fails
        rc, _, err = cli.finish(timeout=120)
    finally:
        cli.kill()
    assert rc == 1, err[-3000:]
    assert any(r["ok"] == "False" for r in read_csv(run_dir / "requests.csv")), "no request was cut"
    rc, _, err = _cli("run", "--resume", str(run_dir))
    assert rc == 0, err[-3000:]
    assert_same_figures(run_dir, reference)  # errors 0, as in the uninterrupted run


# ---- 5. the run directory's plan is the one that resumes --------------------------------------------------


def _edited(plan_file: Path, dest: Path, **changes: object) -> Path:
    data = yaml.safe_load(plan_file.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def test_a_changed_plan_is_refused_with_the_differences(tmp_path: Path, reference: Path):
    run_dir = _copy(reference, tmp_path)
    _drop_phase_rows(run_dir, keep=len(read_csv(run_dir / "phases.csv")) - 1)
    plan_file = Path(json.loads((run_dir / "provenance.json").read_text())["plan_file"])
    edited = _edited(plan_file, tmp_path / "edited.yaml", variants__1__num_steps=5,
                     suites__0__prompts__0__text="Something else entirely.")
    frozen = {n: (run_dir / n).read_bytes() for n in ("plan.resolved.json", "requests.csv", "phases.csv")}
    rc, _, err = _cli("run", "--resume", str(run_dir), "--plan", str(edited))
    assert rc == EXIT_BAD_INPUT, err[-3000:]
    assert f"{edited}: differs from the plan {run_dir / 'plan.resolved.json'}" in err
    assert "variants[good].num_steps: 3 -> 5" in err
    assert 'suites[s].prompts[p0].text: "Tell me about tea, part 0." -> "Something else entirely."' in err
    assert {n: (run_dir / n).read_bytes() for n in frozen} == frozen  # refused before touching anything
    assert "good" not in started_pgids(run_dir) or len(started_pgids(run_dir)["good"]) == 1


def test_a_harmless_change_resumes_and_the_run_keeps_its_plan(tmp_path: Path, reference: Path):
    run_dir = _copy(reference, tmp_path)
    _drop_phase_rows(run_dir, keep=len(read_csv(run_dir / "phases.csv")) - 1)
    plan_file = Path(json.loads((run_dir / "provenance.json").read_text())["plan_file"])
    edited = _edited(plan_file, tmp_path / "edited.yaml", run__request_timeout_s=321,
                     server__startup_timeout_s=99)
    resolved = (run_dir / "plan.resolved.json").read_bytes()
    rc, _, err = _cli("run", "--resume", str(run_dir), "--plan", str(edited))
    assert rc == 0, err[-3000:]
    assert "resuming with run.request_timeout_s: 600.0 -> 321.0 (measures nothing)" in err
    assert (run_dir / "plan.resolved.json").read_bytes() == resolved
    assert_same_figures(run_dir, reference)


def test_resume_runs_the_run_s_plan_not_the_edited_file(tmp_path: Path, reference: Path):
    """The plan file edited in place after the run started: the resume measures what the run measured."""
    run_dir = _copy(reference, tmp_path)
    _drop_phase_rows(run_dir, keep=len(read_csv(run_dir / "phases.csv")) - 1)
    prov_path = run_dir / "provenance.json"
    prov = json.loads(prov_path.read_text())
    own = _edited(Path(prov["plan_file"]), tmp_path / "plan.yaml", variants__1__num_steps=5)  # a copy, edited
    prov_path.write_text(json.dumps({**prov, "plan_file": str(own)}))
    resolved = (run_dir / "plan.resolved.json").read_bytes()
    rc, _, err = _cli("run", "--resume", str(run_dir))
    assert rc == 0, err[-3000:]
    assert "note: the plan file differs from the run's plan in 1 fields" in err
    assert (run_dir / "plan.resolved.json").read_bytes() == resolved
    rerun = read_jsonl(run_dir / "variants.jsonl")[-1]
    argv = rerun["launch_command"]
    assert rerun["variant"] == "good" and argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert_same_figures(run_dir, reference)


# ---- 6. two resumes of one directory at once ------------------------------------------------------------


def test_a_second_resume_is_refused_and_the_first_s_server_is_untouched(tmp_path: Path):
    plan = _plan(tmp_path, concurrency=[1], repeats=1, max_tokens=256)
    results = tmp_path / "results"
    cli = Cli(["run", str(plan), "--results-dir", str(results)])
    try:  # an interrupted run with most of its work left
        wait_until(lambda: only_run_dir(results) is not None, 60, "the run directory")
        run_dir = only_run_dir(results)
        assert run_dir is not None
        wait_until(lambda: len(read_csv(run_dir / "requests.csv")) >= 1, 120, "a record")
        cli.proc.send_signal(signal.SIGINT)
        assert cli.proc.wait(60) == 130
    finally:
        cli.kill()
    first = Cli(["run", "--resume", str(run_dir)])
    try:
        wait_until(lambda: len(started_pgids(run_dir).get("baseline", [])) == 2, 60,
                   "the first resume's server")
        pgid = started_pgids(run_dir)["baseline"][1]
        rc, _, err = _cli("run", "--resume", str(run_dir), timeout=60)
        assert rc == EXIT_BAD_INPUT, err[-3000:]
        assert f"error: {run_dir}: in use by another draftbench (pid {first.proc.pid} on " in err
        if first.proc.poll() is None:  # still measuring: its server must be the one it started, alive
            assert pgid in live_groups()
        rc, _, err = first.finish(timeout=180)
    finally:
        first.kill()
    assert rc == 0, err[-3000:]
    assert not [e for e in read_jsonl(run_dir / "servers.jsonl") if e.get("pgid") == pgid and e.get("by")]
    summary = _summary(run_dir)
    assert {k: (r["requests"], r["errors"]) for k, r in summary.items()} == {
        (v, "1"): (str(N_PROMPTS), "0") for v in VARIANTS}
