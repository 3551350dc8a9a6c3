"""draftbench weak-spots / retrain / watch: the closed retrain loop from the command line (thin shells over
harness.retrain.weak_spots, .dataset, .loop and .watch)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from harness.common.errors import EXIT_FAILURES, EXIT_INTERRUPTED, EXIT_OK, InputError, say


def _selection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=["category", "prompt", "turn"], default="category", help="what a spot is")
    p.add_argument("--position", type=int, help="rank spots by P(accept >= K) from the histograms, not by "
                   "accept length")
    p.add_argument("--lowest", type=int, default=1, help="how many of the lowest spots are weak (default 1)")
    p.add_argument("--below", type=float, help="instead: every spot below this fraction of the variant's own")
    p.add_argument("--rest-share", type=float, default=0.25,
                   help="share of the run's other prompts added to the "
                   "data (default 0.25)")
    p.add_argument("--holdout", type=float, default=0.5, help="share of the weak prompts held out for the "
                   "evaluation (default 0.5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--traffic", action="append", default=[], metavar="FILE",
                   help="a traffic log added to the "
                   "data: OpenAI request JSONL, ShareGPT, SpecForge, question.jsonl or prompts (repeatable)")
    p.add_argument("--traffic-sample", type=int, metavar="N", help="a seeded sample of N rows of each log")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    ws = sub.add_parser("weak-spots",
                        help="where a drafter accepts least in a finished run; --out writes the "
                        "regeneration input and its manifest")
    ws.add_argument("run_dir")
    ws.add_argument("--variant", required=True)
    _selection_flags(ws)
    ws.add_argument("--out", help="directory for regen_input.jsonl + manifest.json")

    rt = sub.add_parser("retrain",
                        help="the loop: weak spots -> regen -> train -> evaluate -> promote only on a "
                        "passed A/B (resumes the newest unfinished loop of the plan and variant)")
    rt.add_argument("plan")
    rt.add_argument("--variant", required=True)
    rt.add_argument("--from-run",
                    help="the run whose weak spots to retrain on (default: the newest of the plan)")
    _selection_flags(rt)
    rt.add_argument("--rule", choices=["faster", "faster-or-equivalent-higher-accept"], default="faster",
                    help="what the candidate must be against the current drafter at every concurrency")
    rt.add_argument("--endpoint", action="append", default=[],
                    help="regenerate on existing servers of the target")
    rt.add_argument("--workers", type=int, default=1)
    rt.add_argument("--regen-concurrency", type=int, default=64)
    rt.add_argument("--regen-max-tokens", type=int)
    rt.add_argument("--regen-temperature", type=float)
    for flag, kind in (("--epochs", int), ("--max-steps", int), ("--save-interval", int),
                       ("--ttt-length", int), ("--lr", float), ("--batch-size", int), ("--repeats", int)):
        rt.add_argument(flag, type=kind)
    rt.add_argument("--gpus")
    rt.add_argument("--from-scratch", action="store_true",
                    help="train a new drafter, not fine-tune the current one")
    rt.add_argument("--launcher", help="command replacing torchrun + train script ({python} substituted)")
    rt.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    rt.add_argument("--specforge-dir")
    rt.add_argument("--era", choices=["auto", "script", "script-v0.1", "cli"], default="auto")
    rt.add_argument("--draft-config", help="CLI era: the draft config.json to export with")
    rt.add_argument("--resume", metavar="ID", help="resume this loop (default: the newest unfinished one)")
    rt.add_argument("--new", action="store_true", help="start a new loop even if one is unfinished")
    rt.add_argument("--results-dir", default="results")

    wt = sub.add_parser("watch",
                        help="drift watch: the deployed drafter's acceptance per category against the "
                        "profile of its promotion run (exit 1 on an alarm)")
    wt.add_argument("plan")
    wt.add_argument("--variant", required=True)
    wt.add_argument("--run", help="check this finished run (no traffic), or 'latest' for the plan's newest")
    wt.add_argument("--profile", help="speculation_profile.json (default: the drafter's last promotion's)")
    wt.add_argument("--every", help="check again every interval (30m, 1h, ...) until an alarm")
    wt.add_argument("--keep-going", action="store_true", help="with --every: go on after an alarm")
    wt.add_argument("--results-dir", default="results")


def handlers() -> dict:
    return {"weak-spots": _weak_spots, "retrain": _retrain, "watch": _watch}


def _weak_spots(args: argparse.Namespace) -> int:
    from harness.retrain import weak_spots as ws
    from harness.retrain.dataset import build_input

    rq = ws.variant_requests(args.run_dir, args.variant)
    found, ref = ws.spots(rq, args.by), ws.overall(rq)
    if not found:
        raise InputError(args.run_dir, None, "variant", f"{args.variant}: no request with speculative stats")
    chosen = ws.pick(found, lowest=args.lowest, below=args.below, position=args.position, ref=ref)
    for line in ws.spot_lines(found, chosen, ref):
        print(line)
    if args.out:
        m = build_input(args.run_dir, args.variant, chosen, args.by, args.out, rest_share=args.rest_share,
                        holdout=args.holdout, seed=args.seed, position=args.position, traffic=args.traffic,
                        traffic_sample=args.traffic_sample)
        say(f"{len(m.rows)} rows -> {Path(args.out) / 'regen_input.jsonl'} ({len(m.held_out)} prompts held "
            f"out; dropped: {m.dropped or 'none'}); manifest {Path(args.out) / 'manifest.json'}")
        for note in m.notes:
            say(f"note: {note}")
    return EXIT_OK


def _settings(args: argparse.Namespace):
    from harness.retrain.loop import RetrainSettings
    from harness.retrain.train import parse_gpus

    bad = [e for e in args.env if "=" not in e]
    if bad:
        raise InputError(None, None, "--env", f"expected KEY=VALUE, got {bad[0]!r}")
    import shlex

    return RetrainSettings(
        source_run=args.from_run, level=args.by, position=args.position, lowest=args.lowest, below=args.below,
        rest_share=args.rest_share, holdout=args.holdout, seed=args.seed,
        traffic=[str(Path(t).resolve()) for t in args.traffic], traffic_sample=args.traffic_sample,
        endpoints=args.endpoint, workers=args.workers, regen_concurrency=args.regen_concurrency,
        regen_max_tokens=args.regen_max_tokens, regen_temperature=args.regen_temperature,
        epochs=args.epochs or 2, max_steps=args.max_steps, save_interval=args.save_interval,
        ttt_length=args.ttt_length, learning_rate=args.lr, batch_size=args.batch_size,
        gpus=parse_gpus(args.gpus) if args.gpus else None, fine_tune=not args.from_scratch,
        launcher=shlex.split(args.launcher) if args.launcher else None,
        env=dict(e.split("=", 1) for e in args.env), specforge_dir=args.specforge_dir, era=args.era,
        draft_config=args.draft_config, repeats=args.repeats, rule=args.rule)


def _retrain(args: argparse.Namespace) -> int:
    from harness.cli.progress import consume
    from harness.cli.retrain import _plan
    from harness.retrain.loop import LoopStep, retrain_loop

    plan = _plan(args.plan, args.results_dir)
    settings = _settings(args)
    outcome: list[str] = []

    async def go() -> int:
        from harness.cli.gate import install_stop_handlers

        install_stop_handlers()

        async def steps():
            async for e in retrain_loop(plan, args.variant, settings=settings, results_dir=args.results_dir,
                                        resume=args.resume, new=args.new):
                if isinstance(e, LoopStep):
                    say(f"[{e.stage}] {e.text}")
                    for line in e.lines:
                        (print if e.stage in ("gate", "select") else say)(line)
                    if e.state in ("promoted", "refused") or (e.stage == "done" and e.state == "skipped"):
                        outcome.append(e.state if e.state != "skipped" else e.text)
                    continue
                yield e

        await consume(steps())
        return EXIT_OK if outcome and outcome[-1] == "promoted" else EXIT_FAILURES

    try:
        return asyncio.run(go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        say("interrupted: every finished stage is kept; run the same command to resume the loop")
        return EXIT_INTERRUPTED


def _watch(args: argparse.Namespace) -> int:
    from harness.cli.retrain import _plan
    from harness.common import events as ev
    from harness.retrain.watch import DriftCheck, parse_every, watch

    plan = _plan(args.plan, args.results_dir)
    every = parse_every(args.every) if args.every else None
    run_dir = args.run
    if run_dir == "latest":
        from harness.analysis.runs import list_runs

        mine = [r for r in list_runs(args.results_dir) if r.plan == plan.name]
        if not mine:
            raise InputError(args.results_dir, None, "run", f"no run of plan {plan.name!r}")
        run_dir = mine[0].run_dir
    alarms: list[DriftCheck] = []

    async def go() -> int:
        from harness.cli.gate import install_stop_handlers

        install_stop_handlers()
        async for e in watch(plan, args.variant, results_dir=args.results_dir, run_dir=run_dir,
                             profile=args.profile, every_s=every, keep_going=args.keep_going):
            if isinstance(e, DriftCheck):
                for line in e.lines():
                    print(line)
                if e.alarm:
                    alarms.append(e)
            elif isinstance(e, ev.RunStarted):
                say(f"check run {e.run_id} -> {e.run_dir}")
        return EXIT_FAILURES if alarms else EXIT_OK

    try:
        return asyncio.run(go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        return EXIT_FAILURES if alarms else EXIT_INTERRUPTED
