"""How the suite is spread over pytest-xdist's workers (pyproject: `-n 8 --dist loadgroup
--no-loadscope-reorder`).

Most of the suite's wall time is waiting (stand-in servers starting, stepping and stopping; CLI processes;
pip in test_packaging): about a fifth of it is CPU, so eight workers on two cores finish it in a fraction of
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
recompiles only what changed); Python reads those files whatever the variable says. It also writes the
tests' own files once as pytest's assertion rewriting makes them (~4 s of CPU a worker collecting them
otherwise spent; `_rewrite_once`), and the test helpers' plain .pyc.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest

from tests.durations import load as load_durations

SHORT_S = 0.1  # a test tests/durations.json does not list (under its 0.5 s floor, or new)
HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent / "harness"


def pytest_configure(config: pytest.Config) -> None:
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):  # the controller, or a serial run
        compileall.compile_dir(HARNESS, quiet=1)
        if getattr(config.option, "numprocesses", None):
            _rewrite_once(config)


def _rewrite_once(config: pytest.Config) -> None:
    """Each worker collects every test file, and pytest rewrites each one's asserts before compiling it:
    ~4 s of CPU per worker that, under PYTHONDONTWRITEBYTECODE, no worker can cache for the next. The
    controller writes the rewritten files' cache once, where pytest's own import hook reads it (it reads a
    cached file whatever the variable says, and checks it against the source's mtime and size). pytest's
    private helpers: where they are not what this expects, the workers simply rewrite as before."""
    try:
        from _pytest.assertion import AssertionState
        from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, get_cache_dir

        trace = AssertionState(config, "rewrite")  # _write_pyc only traces through it
        for path in sorted(HERE.glob("*.py")):
            if not (path.name.startswith("test_") or path.name == "conftest.py"):
                compileall.compile_file(path, quiet=1)  # a helper the tests import: a plain module
                continue
            cache = get_cache_dir(path)
            cache.mkdir(exist_ok=True)
            pyc = cache / (path.name[:-3] + PYC_TAIL)
            if pyc.exists() and pyc.stat().st_mtime >= path.stat().st_mtime:
                continue
            source_stat, code = _rewrite_test(path, config)
            _write_pyc(trace, code, source_stat, pyc)
    except (ImportError, AttributeError, TypeError, OSError, SyntaxError):
        return


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
