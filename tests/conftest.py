"""How the suite is spread over pytest-xdist's workers (pyproject: `-n 6 --dist loadgroup`).

Most of the suite's wall time is waiting (stand-in servers starting, stepping and stopping; CLI processes;
pip in test_packaging): about a fifth of it is CPU, so six workers on two cores finish it in a fraction of
the serial time (docs/performance.md, "The test suite"). Two scheduling hints, neither changes what a
test does:
- a module with a module-scoped fixture (a reference run, a stand-in server, an sshd) runs on one worker,
  so the fixture is built once, as in a serial run (`xdist_group` per module);
- the long tests are handed out first, each to the next free worker, so none of them starts last and
  holds the run up at the end.
With `-n 0` (serial) the order is the collection order, as before.
"""

from __future__ import annotations

import pytest

# Modules whose tests take tens of seconds each (measured: docs/performance.md); the `slow` marker adds the
# rest. Only a scheduling hint: a name missing here or a test that got faster changes nothing but the order.
LONG = ("test_packaging.py", "test_tune.py", "test_engines_e2e.py", "test_e2e_ssh.py", "test_decide_run.py",
        "test_tui_tune.py", "test_compare_change.py", "test_verdicts_e2e.py", "test_key_handoff.py",
        "test_multinode.py", "test_exit_codes.py", "test_run_preflight.py", "test_tiny_eagle3.py")


def _module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::", 1)[0]
    for defs in info.name2fixturedefs.values():
        for d in defs:
            if d.scope == "module" and d.baseid.startswith(module):
                return True
    return False


def _long(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None or item.nodeid.split("::", 1)[0].endswith(LONG)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not (hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None)):
        return  # a serial run keeps the collection order
    for item in items:
        if _module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    # loadgroup hands out the groups first (largest first), then single tests in this order
    items.sort(key=lambda item: not _long(item))  # stable: the long ones first, each in collection order
