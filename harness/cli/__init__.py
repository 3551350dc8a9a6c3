"""The command line shells: `draftbench` (commands.py) and the commands of the studies and of retrain beside
it; `python -m harness.cli` and the `draftbench` console script both call `main`.

`draftbench --help` imports the shells (commands, gate, args, retrain, breakeven, tune), so each imports the
core it calls inside the function that calls it: help loads none of pandas, pydantic, the SDK, asyncssh or
textual, and starts at once (tests/test_layering.py). That is what this package's imports inside functions
are for; none of them hides a cycle (tests/test_import_cycles.py)."""

from harness.cli.commands import main

__all__ = ["main"]
