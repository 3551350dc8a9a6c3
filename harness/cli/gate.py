"""What every command that starts servers does first, shared by the CLI shells: the preflight gate
(`--no-check`), and `run`'s stopping rule and budget (`--until-decided`, `--budget`)."""

from __future__ import annotations

import argparse
import asyncio

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

    found = asyncio.run(require_preflight(plan, where, variants=variants, resume_dir=getattr(args, "resume", None)))
    for f in found:  # why a deliberately wrong arm runs anyway
        if is_expected(f) and (variants is None or f.variant in variants):
            say(f"note: variant '{f.variant}' runs as the plan expects: {f.what}")


def stop_rule(plan, args: argparse.Namespace) -> None:
    """--until-decided and --budget onto the plan's run settings; the budget planned before any start."""
    from harness.bench.budget import plan_budget
    from harness.cli.tune import _duration

    if getattr(args, "until_decided", False):
        plan.run.stop = "decided"
        plan.run.max_repeats = max(plan.run.max_repeats, plan.run.repeats)
    if getattr(args, "budget", None):
        try:
            plan.run.budget_s = _duration(args.budget)
        except argparse.ArgumentTypeError as exc:
            raise InputError(None, None, "--budget", str(exc)) from None
        say(plan_budget(plan, args.results_dir, plan.run.budget_s).words())
