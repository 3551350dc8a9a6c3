"""The benchmark pipeline: `run_plan` (runner.py) and what it is made of: the preflight gate, phase sizing,
replay, the stopping rule, budgets, resumes, and a plan over several nodes (multinode.py)."""
