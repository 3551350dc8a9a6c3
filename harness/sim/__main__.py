"""``python -m harness.sim``: the SGLang 0.5.15 stand-in, launched with SGLang's own flags."""

from harness.sim.sglang.run import main

if __name__ == "__main__":
    raise SystemExit(main())
