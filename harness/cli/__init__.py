"""The command line shells: `draftbench` (commands.py) and the commands of the studies and of retrain beside
it; `python -m harness.cli` and the `draftbench` console script both call `main`."""

from harness.cli.commands import main

__all__ = ["main"]
