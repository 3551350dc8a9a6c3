"""draftbench command line: thin commands that parse, call the core, print.

Data goes to stdout; progress and diagnostics to stderr. Exit codes live in harness.common.errors.
Each command imports the core it calls inside itself (harness/cli/__init__.py says why).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import harness
from harness.cli import breakeven, loop, retrain, tune
from harness.cli.gate import add_no_check, gate, install_stop_handlers, load_plan, stop_rule
from harness.cli.synthetic import add_synthetic_args, synthetic_suite_command
from harness.common.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    HarnessError,
    InputError,
    PreflightFailed,
    exit_code_table,
    say,
)
from harness.common.terminal import clean


def _add_wide(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wide", action="store_true", help="the table with every column (summary.csv has them "
                   "all), not only those that decide")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="draftbench",
                                description="Benchmark EAGLE-3 speculative decoding on SGLang.",
                                epilog=exit_code_table(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"draftbench {harness.__version__}")
    sub = p.add_subparsers(dest="command")

    demo = sub.add_parser("demo", help="run the built-in comparison on the SGLang stand-in (no GPU needed)")
    demo.add_argument("--results-dir", default="results")
    demo.add_argument("--keep-servers", action="store_true")
    add_no_check(demo)
    _add_wide(demo)

    run = sub.add_parser("run", help="run a plan: start servers, replay suites, compare")
    run.add_argument("plan", nargs="?", help="plan YAML file")
    run.add_argument("--results-dir", default="results")
    run.add_argument("--keep-servers", action="store_true", help="leave the servers running at the end")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="finish an interrupted run with the plan it started with "
                     "(RUN_DIR/plan.resolved.json)")
    run.add_argument("--plan", dest="plan_flag", metavar="PLAN",
                     help="with --resume: a changed plan, accepted only "
                     "when what changed measures nothing (timeouts, retries, keep_running); else refused")
    run.add_argument("--until-decided", action="store_true",
                     help="run.stop: decided: more repeats of the rows "
                     "still undecided, at looks fixed in advance (docs/metrics.md, the stopping rule)")
    run.add_argument("--budget", metavar="DURATION", help="wall-clock budget (90s, 20m, 2h): planned before "
                     "any server starts; no look is started that it cannot pay for")
    add_no_check(run)
    _add_wide(run)

    pl = sub.add_parser("parse-log", help="parse SGLang Decode/Prefill log lines into a CSV")
    pl.add_argument("file")
    pl.add_argument("--csv", metavar="OUT", help="write the CSV here (default: stdout)")

    ck = sub.add_parser("check", help="preflight checks of a plan on its target, without loading a model")
    ck.add_argument("plan")
    ck.add_argument("--json", action="store_true", help="findings as JSON on stdout")
    ck.add_argument("--results-dir", default="results",
                    help="where the demo plan's models are made and earlier "
                    "runs are read (a drafter's accept length against its training time)")

    sm = sub.add_parser("summary", help="print the comparison table of a finished run")
    sm.add_argument("run_dir")
    sm.add_argument("--csv", metavar="OUT", help="also export the table as CSV here")
    _add_wide(sm)

    cmp_ = sub.add_parser("compare",
                          help="two runs side by side: accept len, tok/s, TTFT, speedup and change, "
                          "and whether B's tok/s differs from A's for real (ratio, 95%% CI, verdict)")
    cmp_.add_argument("run_a")
    cmp_.add_argument("run_b")
    cmp_.add_argument("--csv", metavar="OUT", help="also export the comparison as CSV here")
    cmp_.add_argument("--forced", action="store_true",
                      help="also compare forced-acceptance rows (breakeven's "
                      "copies, labelled FORCED); left out by default: their outputs are not the model's")

    imp = sub.add_parser("import-suite", help="a suite from question.jsonl (MT-bench/Spec-Bench), ShareGPT "
                         "JSON/JSONL, SpecForge JSONL or a JSONL of prompts (docs/workloads.md)")
    imp.add_argument("jsonl", nargs="?", help="the dataset file (not with --synthetic)")
    imp.add_argument("--out", required=True, help="suite YAML to write; its file name (without .yaml) is the "
                     "suite's name, the one a plan's `suites:` lists")
    imp.add_argument("--name", help="the suite's name, when it should differ from --out's file name")
    imp.add_argument("--force", action="store_true", help="overwrite --out when it exists")
    imp.add_argument("--format", default="auto",
                     choices=["auto", "question", "sharegpt", "specforge", "prompts",
                                                          "speed-bench", "openai"])
    imp.add_argument("--turns", default="live", choices=["live", "first", "separate"],
                     help="live: later user turns follow the server's own answers (default); first: first "
                          "turns only; separate: every turn a single-turn prompt")
    imp.add_argument("--all-turns", action="store_const", const="separate", dest="turns",
                     help=argparse.SUPPRESS)
    imp.add_argument("--categories", type=lambda v: [c for c in v.split(",") if c], help="comma-separated")
    imp.add_argument("--min-chars", type=int, help="drop prompts whose user turns are shorter")
    imp.add_argument("--max-chars", type=int, help="drop prompts whose user turns are longer")
    imp.add_argument("--sample", type=int, metavar="N", help="keep a seeded sample of N prompts (file order)")
    imp.add_argument("--seed", type=int, default=1)
    add_synthetic_args(imp)

    retrain.add_parsers(sub)
    breakeven.add_parsers(sub)
    tune.add_parsers(sub)
    loop.add_parsers(sub)
    sub.add_parser("sim-server", help="the SGLang stand-in server (takes sglang.launch_server flags)",
                   add_help=False)
    tui = sub.add_parser("tui", help="open the TUI on a plan (the demo plan when none is given)")
    tui.add_argument("plan", nargs="?")
    tui.add_argument("--results-dir", default="results")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim-server"]:  # every flag belongs to the stand-in's SGLang-compatible parser
        from harness.sim.__main__ import main as sim_main

        return sim_main(argv[1:]) or 0
    for i, arg in enumerate(argv, 1):
        if "\x00" in arg:
            say(f"error: argument {i} contains a NUL byte (\\0): no path or value can hold one")
            return EXIT_BAD_INPUT
    args = build_parser().parse_args(argv)
    try:
        if args.command in (None, "tui"):
            return _tui(getattr(args, "plan", None), getattr(args, "results_dir", "results"))
        handler = {"demo": _demo, "run": _run, "check": _check, "parse-log": _parse_log, "summary": _summary,
                   "import-suite": _import_suite, "compare": _compare, **retrain.handlers(),
                   **breakeven.handlers(), **tune.handlers(), **loop.handlers()}[args.command]
        return handler(args)
    except PreflightFailed as exc:
        for line in exc.lines:
            say(f"error: {line}")
        return exc.exit_code
    except HarnessError as exc:  # InputError: 2 (bad input), others: 1
        say(f"error: {exc}")
        return exc.exit_code
    # a file the harness could not read or write (a full disk, a lost mount): no traceback
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        say(f"error: {where}{exc.strerror or exc}")
        return EXIT_FAILURES
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED


def _tui(plan: str | None, results_dir: str) -> int:
    try:
        from harness.tui.app import run_tui
    except ImportError:
        say("the TUI is not available in this build; use `draftbench demo` or `draftbench run PLAN`")
        return EXIT_BAD_INPUT
    return run_tui(plan, results_dir)


def _run(args: argparse.Namespace) -> int:
    given = args.plan_flag or args.plan
    if args.plan_flag and args.plan and args.plan_flag != args.plan:
        raise InputError(None, None, "plan",
                         f"two plans given ({args.plan}, --plan {args.plan_flag}): give one")
    if args.resume:
        from harness.bench.resume import resume_plan
        from harness.cli.demo import load_ready_plan

        resumed = resume_plan(args.resume, given, load=load_ready_plan)
        for change in resumed.applied:
            say(f"resuming with {change} (measures nothing)")
        if resumed.file_differs:
            say(f"note: the plan file differs from the run's plan in {len(resumed.file_differs)} fields "
                f"(first: {resumed.file_differs[0]}); resuming the run's own plan, "
                f"{Path(args.resume) / 'plan.resolved.json'}")
        plan = resumed.plan
    elif given:
        plan = load_plan(given, args.results_dir)
    else:
        raise InputError(None, None, "plan", "give a plan file, or --resume RUN_DIR")
    gate(plan, args.resume or given, args)
    # run.concurrency: auto: each speculative variant's crossover (tune's search)
    if plan.run.concurrency_auto:
        from harness.cli.tune import run_auto

        return run_auto(plan, args)
    stop_rule(plan, args)
    return _execute(plan, args.results_dir, args.keep_servers, args.resume, args.wide)


def _demo(args: argparse.Namespace) -> int:
    from harness.cli.demo import prepare_demo

    plan = prepare_demo(args.results_dir)
    gate(plan, "plans/demo.yaml", args)
    return _execute(plan, args.results_dir, args.keep_servers, None, args.wide)


def _execute(plan, results_dir: str, keep: bool, resume: str | None, wide: bool = False) -> int:
    from harness.cli.progress import consume
    from harness.common import events as ev
    from harness.serve.left_running import results_dir_notices, run_dir_notices

    # servers an earlier draftbench was killed before stopping (SIGKILL, a crash): `--resume` stops its own
    for line in ([] if resume else results_dir_notices(results_dir)):
        say(line)
    run_dir: list[str] = [resume] if resume else []

    async def go() -> int:
        from harness.bench.runner import run_plan

        install_stop_handlers()

        async def watch(events):
            async for e in events:
                if isinstance(e, ev.RunStarted):
                    run_dir[:] = [e.run_dir]
                yield e

        if plan.targets or (resume and (Path(resume) / "nodes.json").exists()):
            from harness.bench.multinode import run_multi

            events = run_multi(plan, results_dir=results_dir, keep_servers=keep, resume_dir=resume)
        else:
            events = run_plan(plan, results_dir=results_dir, keep_servers=keep, resume_dir=resume)
        return await consume(watch(events), wide=wide)

    def left() -> list[str]:
        """Servers this run started and did not stop (cut short, or the target lost)."""
        if not run_dir:
            return []
        root = Path(run_dir[0])
        dirs = [root, *sorted(root.parent.glob(f"{root.name}@*"))]  # a multi-node run's node directories
        return [line for d in dirs for line in run_dir_notices(d, ours=True)]

    try:
        rc = asyncio.run(go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        lines = left()
        for line in lines:
            say(line)
        say(("interrupted: finished requests kept" if lines else
             "interrupted: servers stopped, finished requests kept")
            + "; resume with `draftbench run --resume " + (run_dir[0] if run_dir else "RUN_DIR") + "`")
        return EXIT_INTERRUPTED
    except HarnessError:
        for line in left():  # a lost target: its servers may be running still
            say(line)
        raise
    for line in left():
        say(line)
    return rc


def _check(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan, args.results_dir)  # the demo's model directories must exist to be inspected
    from harness.checks import findings_json, has_errors, render_findings, run_checks
    from harness.targets import open_target

    async def go():
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
        await target.connect()
        try:
            return await run_checks(plan, target)
        finally:
            await target.close()

    findings = asyncio.run(go())
    from harness.bench.gate import earlier_accept_lengths
    from harness.checks.realism import training_findings
    from harness.common.findings import sort_findings

    findings = sort_findings(findings + training_findings(plan, earlier_accept_lengths(args.results_dir)))
    print(findings_json(findings) if args.json else clean(render_findings(findings)))
    return EXIT_BAD_INPUT if has_errors(findings) else EXIT_OK  # a failed preflight is bad input


def _parse_log(args: argparse.Namespace) -> int:
    if not Path(args.file).exists():
        raise InputError(args.file, None, None, "log file not found")
    from harness.engines.sglang.logcsv import (
        write_log_csv,  # the bytes write_windows_csv(parse_file(...)) writes, faster
    )
    if args.csv:
        n = write_log_csv(args.file, args.csv)
        say(f"{n} windows -> {args.csv}")
    else:
        write_log_csv(args.file, sys.stdout)
    return EXIT_OK


def _summary(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "requests.csv").exists():
        raise InputError(str(run_dir), None, None, "not a run directory (no requests.csv)")
    from harness.analysis.completeness import missing_parts
    from harness.analysis.load_report import render_load_tables
    from harness.analysis.report import render_table
    from harness.analysis.runs import run_info
    from harness.analysis.summary import load_summary, summarise_run

    _say_left_running(run_dir)
    if not (run_dir / "summary.csv").exists():  # never summarised: the run did not finish
        summarise_run(run_dir, complete=run_info(run_dir).status == "complete")
    df = load_summary(run_dir)
    missing = missing_parts(run_dir)
    if missing is not None:  # the mark comes first, with what is missing, then the rows the run has
        print(clean(missing.headline()))
        print(clean("\n".join(f"  {line}" for line in missing.lines())))
    print(clean(render_table(df, wide=args.wide)))
    extra = render_load_tables(run_dir)
    if extra:
        print(clean(extra))
    if args.csv:
        df.to_csv(args.csv, index=False)
        say(f"exported {args.csv}")
    return EXIT_OK


def _say_left_running(run_dir: Path) -> None:
    """A run whose draftbench was killed (SIGKILL, a crash) may have left its servers running: say so."""
    from harness.serve.left_running import run_dir_notices

    for line in run_dir_notices(run_dir):
        say(line)


def _compare(args: argparse.Namespace) -> int:
    for d in (args.run_a, args.run_b):
        if not (Path(d) / "requests.csv").exists():
            raise InputError(d, None, None, "not a run directory (no requests.csv)")
        _say_left_running(Path(d))
    from harness.analysis.compare import LEGEND, compare_runs, comparison_rows
    from harness.analysis.report import grid
    from harness.analysis.runs import load_run

    comparison = compare_runs(load_run(args.run_a), load_run(args.run_b), forced=args.forced)
    headers, rows = comparison_rows(comparison)
    print(f"A = {args.run_a}\nB = {args.run_b}")
    print(clean(grid(headers, [list(cells) for _, cells in rows])))
    print(f"\n{LEGEND}")
    if args.csv:
        comparison.table.to_csv(args.csv, index=False)
        say(f"exported {args.csv}")
    return EXIT_OK


def _import_suite(args: argparse.Namespace) -> int:
    from harness.inputs.importers import import_suite
    from harness.inputs.suites import write_suite_yaml

    out = Path(args.out)
    if out.exists() and not args.force:
        raise InputError(args.out, None, "--out", "exists; give --force to overwrite it, or another --out")
    name = args.name or out.name.removesuffix(".yaml").removesuffix(".yml")  # not the input's: question.jsonl
    if args.synthetic:
        return synthetic_suite_command(args, name)
    if not args.jsonl:
        raise InputError(None, None, "jsonl", "give the dataset file to import (or --synthetic --tokens N "
                         "--tokenizer PATH)")
    suite, report = import_suite(args.jsonl, fmt=args.format, name=name, turns=args.turns,
                                 categories=args.categories, min_chars=args.min_chars,
                                 max_chars=args.max_chars, sample=args.sample, seed=args.seed)
    write_suite_yaml(suite, args.out)
    for line in report.lines():
        say(line)
    say(f"{len(suite.prompts)} prompts ({report.turns} turns) -> {args.out}")
    return EXIT_OK

