"""The suite's per-test durations (tests/durations.json), for tests/conftest.py's scheduling order.

`python tests/durations.py` runs the suite (the README's command with `--durations=0`) and rewrites
durations.json from what it printed: seconds per test (setup, call and teardown added; a module fixture's
setup is charged to the test that built it), those of 0.5 s or more. Stale figures only change the order in
which the tests are handed to the workers, never what a test does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
MIN_S = 0.5
LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S+)$")


def parse(text: str) -> dict[str, float]:
    """pytest's `--durations=0` lines -> seconds per node id (xdist's `@group` suffix dropped)."""
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            nodeid = m.group(2)
            if nodeid.rfind("@") > nodeid.rfind("]"):
                nodeid = nodeid.rsplit("@", 1)[0]
            out[nodeid] += float(m.group(1))
    return {k: round(v, 1) for k, v in sorted(out.items()) if v >= MIN_S}


def load() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def main() -> int:
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--durations=0", *sys.argv[1:]],
                         cwd=HERE.parent, capture_output=True, text=True)
    found = parse(run.stdout)
    if not found:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        return 1
    failed = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    print("\n".join(failed))
    DURATIONS.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    total = sum(found.values())
    print(f"{DURATIONS.name}: {len(found)} tests, {total:.0f} s (pytest exited {run.returncode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
