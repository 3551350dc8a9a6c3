"""``python -m harness.sim.vllm serve MODEL ...``: the vLLM stand-in."""

from harness.sim.vllm.server import main

if __name__ == "__main__":
    raise SystemExit(main())
