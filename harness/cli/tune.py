"""draftbench tune: the fastest speculative config of a drafter, or proof that none beats the baseline
(a thin shell over harness.studies.tune; the answer and tables come from harness.analysis.tune_report)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from harness.cli.args import duration, graphs, levels_or_auto, positive_ints
from harness.cli.gate import add_no_check, gate, install_stop_handlers
from harness.common.errors import EXIT_FAILURES, EXIT_INTERRUPTED, EXIT_OK, InputError, say
from harness.common.terminal import clean

PROGRESS_EVERY_S = 2.0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    tn = sub.add_parser("tune", help="find the fastest speculative config of a drafter (or prove none "
                        "beats the baseline) in a handful of server starts")
    tn.add_argument("plan", nargs="?", help="plan YAML file")
    tn.add_argument("--variant", help="the speculative variant whose drafter is tuned (default: the first)")
    tn.add_argument("--budget", type=duration, default=7200.0,
                    help="wall-clock budget, e.g. 90m, 2h (default 2h)")
    tn.add_argument("--concurrency", type=levels_or_auto, help="levels to tune for, e.g. 1,8,32 (default: "
                    "the plan's), or auto: find where speculation stops paying (docs/tune.md, "
                    "\"The crossover\")")
    tn.add_argument("--max-batch", type=int, help="auto: the largest batch tried (default: the server's max "
                    "running requests)")
    tn.add_argument("--mix", type=mix_arg, help="auto: a mixed load, concurrency:share of time, e.g. "
                    "1:0.5,8:0.3,32:0.2; the schedule meets every single config on it in a paired run")
    tn.add_argument("--no-load", action="store_true",
                    help="auto: no request-rate phases (goodput against rate)")
    tn.add_argument("--steps", type=positive_ints, default=[1, 2, 3, 4, 5, 6, 7],
                    help="num_steps values (default 1-7)")
    tn.add_argument("--topk", type=positive_ints, default=[1], help="eagle_topk values (default 1: chains)")
    tn.add_argument("--draft-tokens", type=positive_ints, default=[8, 16],
                    help="num_draft_tokens of trees (topk > 1)")
    tn.add_argument("--graphs", type=graphs, default=[True, False], help="CUDA graphs: on, off or both")
    tn.add_argument("--cost-tokens", type=int, default=96, help="tokens per request in a step-cost phase")
    tn.add_argument("--verify-top", type=int, default=1,
                    help="winners per concurrency given a full paired run")
    tn.add_argument("--no-preflight", action="store_true", help="skip preflight of the grid")
    tn.add_argument("--results-dir", default="results")
    add_no_check(tn)
    tn.add_argument("--resume", metavar="TUNE_DIR", help="continue an interrupted tune")
    tn.add_argument("--report", metavar="TUNE_DIR", help="rebuild tune.csv, the profile and the answer from "
                    "a tune directory's files (one copied back from a node, or made by an older draftbench); "
                    "starts nothing")
    tn.add_argument("--write-plan", action="store_true", help="append the winning variant to the plan file")


def mix_arg(text: str) -> str:
    from harness.analysis.schedule import parse_mix

    try:
        parse_mix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return text


def handlers() -> dict:
    return {"tune": _tune}


def _tune(args: argparse.Namespace) -> int:
    # each branch imports the study once its input is there: a wrong path answers at once
    if args.report:
        if not (Path(args.report) / "tune_plan.json").exists():
            raise InputError(args.report, None, None, "not a tune directory (no tune_plan.json)")
        from harness.studies.tune_view import rebuild_report

        csv = rebuild_report(args.report)
        print(clean((Path(args.report) / "tune_report.txt").read_text(encoding="utf-8")), end="")
        say(f"rebuilt {csv}")
        return EXIT_OK
    if args.resume:
        if not (Path(args.resume) / "tune_plan.json").exists():
            raise InputError(args.resume, None, None, "not a tune directory (no tune_plan.json)")
        from harness.studies.tune import read_tune_plan

        plan, opts = read_tune_plan(args.resume)
        if "--budget" in sys.argv:  # resumed: --budget is what to spend now, on top of what was spent
            from harness.analysis.store import read_tune_state

            spent = float(read_tune_state(Path(args.resume)).spent_s)
            opts.budget_s = spent + args.budget
            say(f"resumed: {spent:.0f} s spent before, {args.budget:.0f} s more "
                f"(budget {opts.budget_s:.0f} s)")
    elif args.plan:
        if not Path(args.plan).exists():
            raise InputError(args.plan, None, None, "plan file not found")
        from harness.cli.demo import load_ready_plan
        from harness.studies.tune import TuneOptions

        # a simulated plan's relative checkpoints: the demo's
        plan = load_ready_plan(args.plan, args.results_dir)
        auto = args.concurrency == "auto"
        opts = TuneOptions(variant=args.variant, budget_s=args.budget,
                           concurrency=None if auto else args.concurrency, steps=args.steps, topk=args.topk,
                           draft_tokens=args.draft_tokens, graphs=args.graphs, cost_tokens=args.cost_tokens,
                           verify_top=args.verify_top, preflight=not args.no_preflight, auto=auto,
                           max_batch=args.max_batch, mix=args.mix, load=not args.no_load)
        tuned = next((v for v in plan.variants if v.name == args.variant), None) if args.variant else \
            next((v for v in plan.variants if v.drafter is not None), None)
        if tuned is not None:  # the plan's own arms first; the grid's configs get tune's own preflight
            gate(plan, args.plan, args, variants=[tuned.name, plan.baseline_of(tuned).name])
    else:
        raise InputError(None, None, "plan", "give a plan file, or --resume TUNE_DIR")
    try:
        code, tune_dir = asyncio.run(_go(plan, opts, args.results_dir, args.resume))
    except (KeyboardInterrupt, asyncio.CancelledError):
        say("interrupted: servers stopped, measurements kept; "
            "continue with `draftbench tune --resume TUNE_DIR`")
        return EXIT_INTERRUPTED
    if args.write_plan and tune_dir and args.plan:
        import pandas as pd

        from harness.analysis.tune_outputs import write_plan_variant

        tuned = plan.variant(opts.variant) if opts.variant else next(v for v in plan.variants if v.drafter)
        name = write_plan_variant(Path(args.plan), pd.read_csv(Path(tune_dir) / "tune.csv"), tuned)
        say(f"added variant {name} to {args.plan}" if name else "no measured winner to add to the plan")
    return code


def run_auto(plan, args: argparse.Namespace, clock=time.monotonic) -> int:
    """`draftbench run` with run.concurrency: auto: per speculative variant, tune's crossover search over that
    variant's own config alone (a grid of one): step costs at a ladder of batches, bisection, a paired run on
    each side, the schedule (docs/tune.md, "The crossover"). `--budget` is the whole run's: each variant's
    search gets an equal share of what is left when it starts (what one leaves unspent goes to the next)."""
    from harness.studies.tune import TuneOptions

    try:
        budget = duration(args.budget) if getattr(args, "budget", None) else 7200.0
    except argparse.ArgumentTypeError as exc:
        raise InputError(None, None, "--budget", str(exc)) from None
    codes = []
    searched = []
    for v in [v for v in plan.variants if v.is_speculative and v.drafter is not None]:
        if plan.baseline_of(v) is not plan.baseline:
            say(f"{v.name}: another sampling arm than {plan.baseline.name}: its crossover is not searched")
            continue
        searched.append(v)
    began = clock()
    for i, v in enumerate(searched):
        share = (budget - (clock() - began)) / (len(searched) - i)
        steps = int(v.num_steps or 3)
        topk = int(v.eagle_topk or 1)
        opts = TuneOptions(variant=v.name, budget_s=share, steps=[steps], topk=[topk],
                           draft_tokens=[int(v.num_draft_tokens or steps + 1)], graphs=[bool(v.cuda_graph)],
                           auto=True, verify_top=1)
        say(f"run.concurrency auto: where {v.name} stops paying (budget {share:.0f} s of {budget:.0f} s)")
        try:
            code, _ = asyncio.run(_go(plan, opts, args.results_dir, None))
        except InputError as exc:
            if not i or exc.field != "--budget":  # the first search's refusal: before anything started
                raise
            say(f"{v.name}: its crossover is not searched: {exc.message}")
            codes.append(EXIT_FAILURES)
            continue
        except (KeyboardInterrupt, asyncio.CancelledError):
            say("interrupted: servers stopped, measurements kept; "
                "continue with `draftbench tune --resume TUNE_DIR`")
            return EXIT_INTERRUPTED
        codes.append(code)
    return max(codes, default=EXIT_OK)


async def _go(plan, opts, results_dir: str, resume: str | None) -> tuple[int, str]:
    from harness.cli.progress import look_words, sized_words
    from harness.common import events as ev
    from harness.studies.tune import tune

    install_stop_handlers()
    last, code, tune_dir = 0.0, EXIT_FAILURES, ""
    async for e in tune(plan, opts, results_dir=results_dir, resume_dir=resume):
        if isinstance(e, ev.TuneStage):
            say(f"tune [{e.stage}] {e.message} ({e.spent_s:.0f}/{e.budget_s:.0f} s)")
        elif isinstance(e, ev.TuneCandidate):
            exp = f", expected {e.expected_speedup:.2f}x" if e.expected_speedup else ""
            cost = f", est. {e.est_cost_s:.0f} s" if e.est_cost_s else ""
            say(f"tune {e.config}: {e.status}{exp}{cost}{' (' + e.detail + ')' if e.detail else ''}")
        elif isinstance(e, ev.ServerState) and e.state in ("starting", "adopted", "ready", "failed"):
            say(f"  [{e.variant}] server {e.state}{': ' + e.detail if e.state == 'adopted' else ''}")
        elif isinstance(e, ev.RequestDone):
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                say(f"  {e.done}/{e.total} requests")
        elif isinstance(e, ev.PhaseSized):
            say(f"  [{e.variant}] {sized_words(e)}")
        elif isinstance(e, ev.Look):
            say(f"  {look_words(e)}")
        elif isinstance(e, ev.Alarm) and (e.severity == "error" or e.code == "one-off-compile"):
            say(f"  [{e.variant}] {e.code}: {e.message}")
        elif isinstance(e, ev.TuneDone):
            tune_dir = e.tune_dir
            report = Path(e.tune_dir) / "tune_report.txt"
            if report.exists():
                print(clean(report.read_text(encoding="utf-8")), flush=True)
            say(f"{e.starts} server starts for a grid of {e.grid_size}; stop: {e.stop_reason}")
            print(e.tune_dir, flush=True)
            # stopped by its budget with an answer (measured or predicted): the tune did its job
            code = EXIT_OK if e.complete or (e.answered and e.stop_reason == "budget") else EXIT_FAILURES
    return code, tune_dir
