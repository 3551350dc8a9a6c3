"""Crafted input ends in one clear line, never a traceback or a runaway: YAML alias amplification refused by
the size of the expanded document (FILE:LINE), NUL bytes in a plan value or an argument, unwritable results
and run directories, a missing API key variable (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from harness.cli import main as cli_main
from harness.common.errors import InputError
from harness.inputs.config import load_plan
from harness.inputs.yamlio import parse_yaml
from tests.faults_helpers import SIM_LAUNCHER, prompts, reap_servers, sim_env, write_plan


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def test_alias_amplification_is_refused_with_the_anchor_line():
    """The battery's plan: one 1 MB string and 300 aliases to it (a 300 MB plan.resolved.json before)."""
    big = "x" * (1 << 20)
    text = f"name: bomb\nblob: &b {big}\nrefs:\n" + "".join("  - *b\n" for _ in range(300))
    with pytest.raises(InputError) as err:
        parse_yaml(text, "bomb.yaml")
    e = err.value
    assert (e.path, e.line) == ("bomb.yaml", 2)
    assert "aliases expand this document to 315,621,699 characters, over the 10,507,030 allowed" in e.message
    assert "repeated 301 times" in e.message


def test_billion_laughs_is_refused_before_it_is_built():
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    with pytest.raises(InputError, match="aliases expand this document"):
        parse_yaml("\n".join(lines) + "\n", "laughs.yaml")


def test_modest_alias_reuse_still_loads():
    text = "base: &b {port: 1, tp: 2}\nvariants:\n" \
        + "".join(f"  - {{<<: *b, name: v{i}}}\n" for i in range(20))
    data, _ = parse_yaml(text, "ok.yaml")
    assert len(data["variants"]) == 20 and data["variants"][3] == {"port": 1, "tp": 2, "name": "v3"}


def test_a_recursive_alias_is_refused():
    with pytest.raises(InputError, match="contains it"):
        parse_yaml("a: &a\n  - *a\n", "loop.yaml")


def _plan(tmp_path: Path, **kw) -> Path:
    return write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                      env=sim_env(0.05), variants=[{"name": "baseline"}], suite_prompts=prompts(2),
                      run={"concurrency": [1], "max_tokens": 4}, **kw)


@pytest.mark.parametrize(("where", "field"), [("env", "target.env.X"),
                                              ("extra_args", "variants[0].extra_args[1]"),
                                              ("path", "model.path")])
def test_nul_bytes_in_a_plan_are_a_located_input_error(tmp_path: Path, where: str, field: str):
    path = _plan(tmp_path)
    data = yaml.safe_load(path.read_text())
    if where == "env":
        data["target"]["env"]["X"] = "a\0b"
    elif where == "extra_args":
        data["variants"][0]["extra_args"] = ["--x", "a\0b"]
    else:
        data["model"]["path"] = "demo-models/tar\0get"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_plan(path)
    assert err.value.field == field and err.value.line and "NUL byte" in err.value.message


def test_a_nul_byte_in_an_argument_exits_2(capsys):
    assert cli_main(["summary", "run\0dir"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: argument 2 contains a NUL byte (\\0): no path or value can hold one"


@pytest.mark.skipif(os.geteuid() == 0 and not os.environ.get("DRAFTBENCH_TEST_AS_ROOT_OK"),
                    reason="root writes anywhere: permissions cannot fail")
def test_unwritable_results_dir_is_one_line(tmp_path: Path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc = cli_main(["run", str(_plan(tmp_path)), "--results-dir", str(ro / "results")])
    finally:
        ro.chmod(0o700)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith(f"error: {ro / 'results'}: --results-dir: cannot create a run directory")


def test_a_results_dir_that_is_a_file_is_one_line(tmp_path: Path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("not a directory")
    rc = cli_main(["run", str(_plan(tmp_path)), "--results-dir", str(blocker / "sub")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith(f"error: {blocker / 'sub'}: --results-dir: cannot create a run directory")
    assert "Traceback" not in "\n".join(err)


def test_a_run_dir_whose_records_cannot_be_written_is_one_line(tmp_path: Path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.csv").mkdir()  # what stands where the records go cannot be appended to
    from harness.analysis.records import RECORD_COLUMNS
    from harness.analysis.store import CsvAppender

    with pytest.raises(InputError, match="cannot write records: Is a directory"):
        CsvAppender(run / "requests.csv", RECORD_COLUMNS)


def test_a_missing_api_key_variable_exits_2_naming_the_field(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("DB_NOT_SET_26", raising=False)
    path = _plan(tmp_path, server={"api_key_env": "DB_NOT_SET_26"})
    assert cli_main(["run", str(path), "--results-dir", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: {path}: server.api_key_env: variant 'baseline': the API key variable "
                   "DB_NOT_SET_26 is not set in this environment")
