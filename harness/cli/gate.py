"""What every command that starts servers does, shared by the CLI shells: its plan loaded, the preflight
gate (`--no-check`), `run`'s stopping rule and budget (`--until-decided`, `--budget`), and how it takes
Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from harness.cli.args import duration
from harness.common.errors import InputError, say


def add_no_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-check", action="store_true", help="skip the preflight (`draftbench check`) that "
                   "otherwise stops the command on an error before any server starts")


def gate(plan, where: str | None, args: argparse.Namespace, variants=None) -> None:
    """The preflight of a command that starts servers (harness.bench.gate); PreflightFailed: exit 2."""
    if getattr(args, "no_check", False):
        return
    from harness.bench.gate import require_preflight
    from harness.checks.expected import is_expected

    found = asyncio.run(require_preflight(plan, where, variants=variants,
                                          resume_dir=getattr(args, "resume", None)))
    for f in found:  # why a deliberately wrong arm runs anyway
        if is_expected(f) and (variants is None or f.variant in variants):
            say(f"note: variant '{f.variant}' runs as the plan expects: {f.what}")


def stop_rule(plan, args: argparse.Namespace) -> None:
    """--until-decided and --budget onto the plan's run settings; the budget planned before any start."""
    from harness.bench.budget import plan_budget

    if getattr(args, "until_decided", False):
        plan.run.stop = "decided"
        plan.run.max_repeats = max(plan.run.max_repeats, plan.run.repeats)
    if getattr(args, "budget", None):
        try:
            plan.run.budget_s = duration(args.budget)
        except argparse.ArgumentTypeError as exc:
            raise InputError(None, None, "--budget", str(exc)) from None
        say(plan_budget(plan, args.results_dir, plan.run.budget_s).words())


def load_plan(path: str, results_dir: str = "results"):
    from harness.cli.demo import load_ready_plan

    if not Path(path).exists():
        raise InputError(path, None, None, "plan file not found")
    return load_ready_plan(path, results_dir)  # the demo plan gets its checkpoints, from any directory


def install_stop_handlers(what: str = "the servers") -> None:
    """How a long command takes SIGINT, SIGTERM and SIGHUP (for the current task, in the running loop): the
    first cancels the work, whose cleanup then stops its servers; a second Ctrl-C must not cut that cleanup
    short (it left the server running while the CLI said "servers stopped"); a third leaves the servers, and
    the caller names them."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    presses = [0]

    def stop(sig: signal.Signals) -> None:
        presses[0] += 1
        if presses[0] == 1:
            say(f"interrupted: stopping {what}, finished requests are kept (Ctrl-C "
                "again does not cut this short)")
            task.cancel()
        elif sig == signal.SIGINT and presses[0] == 2:
            say(f"still stopping {what}: one more Ctrl-C leaves them running")
        elif sig == signal.SIGINT:
            task.cancel()  # further SIGTERMs and SIGHUPs change nothing: the cleanup goes on

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop, sig)
