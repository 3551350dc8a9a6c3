"""`draftbench breakeven PLAN --variant V`: the variant at forced accept lengths against the baseline
(harness.studies.breakeven); prints the table, breakeven.csv stays in the run directory."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from harness.cli.gate import add_no_check, gate, install_stop_handlers, load_plan
from harness.common.errors import EXIT_INTERRUPTED, HarnessError, say
from harness.common.terminal import clean


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from exc


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from exc


def add_parsers(sub: argparse._SubParsersAction) -> None:
    be = sub.add_parser("breakeven",
                        help="run a variant at forced accept lengths (outputs not the model's) and "
                        "find where it equals the baseline's tok/s")
    be.add_argument("plan")
    be.add_argument("--variant", required=True, help="the speculative variant to force")
    be.add_argument("--accept-lens", type=_floats, default=None, metavar="A,B,C",
                    help="forced accept lengths (default 1.5,2.5,3.5)")
    be.add_argument("--concurrency", type=_ints, default=None, metavar="N,M",
                    help="concurrencies (default: the plan's)")
    be.add_argument("--results-dir", default="results")
    add_no_check(be)


def handlers() -> dict:
    return {"breakeven": _breakeven}


def _breakeven(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan, args.results_dir)
    from harness.analysis.breakeven import render_forced_table
    from harness.cli.progress import consume
    from harness.studies.breakeven import DEFAULT_ACCEPT_LENS, read_forced_table, run_breakeven

    forced = next((v for v in plan.variants if v.name == args.variant), None)
    if forced is not None:  # an unknown variant is run_breakeven's own error
        gate(plan, args.plan, args, variants=[forced.name, plan.baseline_of(forced).name])
    lens = args.accept_lens or list(DEFAULT_ACCEPT_LENS)
    run_dir: list[str] = []

    async def go() -> int:
        install_stop_handlers()

        async def events():
            async for event in run_breakeven(plan, args.variant, lens, concurrency=args.concurrency,
                                             results_dir=args.results_dir):
                if type(event).__name__ == "RunDone":
                    run_dir.append(event.run_dir)
                yield event
        return await consume(events())

    try:
        rc = asyncio.run(go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        say("interrupted: servers stopped, finished requests kept")
        return EXIT_INTERRUPTED
    table = Path(run_dir[0]) / "breakeven.csv" if run_dir else None
    if table is None or not table.exists():
        # the command ran and its variants failed: exit 1, not bad input
        raise HarnessError(f"{args.plan}: the breakeven run produced no table (see the log above)")
    print(clean(render_forced_table(read_forced_table(table))))
    say(f"breakeven.csv: {table}")
    return rc
