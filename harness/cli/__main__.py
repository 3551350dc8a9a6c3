"""`python -m harness.cli ARGS` == `draftbench ARGS`."""

from harness.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
