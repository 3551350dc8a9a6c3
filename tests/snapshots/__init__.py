"""Fixed data for the TUI tests: a plan, suites, drafters, two finished runs, and fakes of the core."""
