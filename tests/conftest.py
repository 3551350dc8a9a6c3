"""How the suite is spread over pytest-xdist's workers (pyproject: `-n 6 --dist loadgroup
--no-loadscope-reorder`).

Most of the suite's wall time is waiting (stand-in servers starting, stepping and stopping; CLI processes;
pip in test_packaging): about a fifth of it is CPU, so six workers on two cores finish it in a fraction of
the serial time (docs/performance.md, "The test suite"). Two scheduling hints, neither changes what a
test does:
- a module with a module-scoped fixture (a reference run, a stand-in server, an sshd) runs on one worker,
  so the fixture is built once, as in a serial run (`xdist_group` per module);
- the work units (a group, or a test on its own) are handed out longest first, by the seconds each took in
  the last measured run (tests/durations.json, rewritten by `python tests/durations.py`): the longest-first
  rule that packs the workers evenly. xdist's own order (its "reorder") is by the number of tests in a unit,
  which put every module-fixture group before the longest single tests: test_tune's 170 s started at 204 s
  of a 371 s run and its worker ended 24 s after the others. A test missing from the file counts as short.
With `-n 0` (serial) the order is the collection order, as before.

Under PYTHONDONTWRITEBYTECODE=1 no process writes a .pyc, so every process the suite starts (~110 CLI runs,
a few hundred stand-ins and probes) compiled the harness modules it imports from source: ~0.25 s of CPU per
CLI run. The controller compiles harness/ once before the workers start (compileall, ~0.5 s; a later run
recompiles only what changed); Python reads those files whatever the variable says. The tests' own modules
are left alone: the workers import them at once, so a cache could not help within a run.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest

from tests.durations import load as load_durations

SHORT_S = 0.1  # a test tests/durations.json does not list (under its 0.5 s floor, or new)
HARNESS = Path(__file__).resolve().parent.parent / "harness"


def pytest_configure(config: pytest.Config) -> None:
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):  # the controller, or a serial run
        compileall.compile_dir(HARNESS, quiet=1)


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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not (hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None)):
        return  # a serial run keeps the collection order
    for item in items:
        if _module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    # longest unit first (a group's seconds are its tests'); stable, so a tie keeps the collection order
    seconds = load_durations()
    unit: dict[str, float] = {}
    for item in items:
        key = _unit(item)
        unit[key] = unit.get(key, 0.0) + seconds.get(item.nodeid, SHORT_S)
    items.sort(key=lambda item: -unit[_unit(item)])


def _unit(item: pytest.Item) -> str:
    """What xdist's loadgroup scheduling hands out whole: the test's group, else the test alone."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return "@" + str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return item.nodeid
