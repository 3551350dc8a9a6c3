"""The CLI's contract: exit codes, data on stdout, diagnostics on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import harness

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "sglang-0.5.15.post1"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=300)


def test_version():
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"draftbench {harness.__version__}"


def test_bad_plan_is_exit_2_with_one_clear_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: x\nmodel: {path: /m, tp_size: 0}\nvariants: [{name: baseline}]\nsuites: [smoke]\n")
    out = cli("run", str(plan), "--results-dir", str(tmp_path / "r"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert f"{plan}:2: model.tp_size:" in out.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_missing_plan_file(tmp_path):
    out = cli("run", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "plan file not found" in out.stderr


def test_parse_log_on_the_real_capture(tmp_path):
    out_csv = tmp_path / "w.csv"
    out = cli("parse-log", str(FIX / "server-eagle3.log"), "--csv", str(out_csv))
    assert out.returncode == 0, out.stderr
    lines = out_csv.read_text().splitlines()
    assert lines[0].startswith("line,time,kind,running_req,queue_req,token_usage,accept_len,accept_rate,"
                               "cuda_graph,gen_throughput,input_throughput")
    log = (FIX / "server-eagle3.log").read_bytes().decode("utf-8", "replace").split("\n")
    expected = sum(1 for ln in log if "] Decode batch" in ln or "] Prefill batch" in ln)
    assert len(lines) - 1 == expected
    first = lines[1].split(",")
    assert log[int(first[0]) - 1].find("Prefill batch") > 0  # the line number points at the source line


def test_check_demo_reports_the_wrong_flag_variant(tmp_path):
    import yaml

    plan = yaml.safe_load((ROOT / "plans" / "demo.yaml").read_text())
    for v in plan["variants"]:
        v.pop("expect", None)  # undeclared, the wrong arm is an error: a failed preflight is exit 2
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    out = cli("check", str(tmp_path / "demo.yaml"), "--json", "--results-dir", str(tmp_path))
    assert out.returncode == 2, out.stderr
    data = json.loads(out.stdout)
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert [f["variant"] for f in errors] == ["wrong-flag-eagle"]
    assert "EAGLE3" in errors[0]["fix"]


@pytest.mark.parametrize("cmd", [["summary", "/nonexistent-run"], ["parse-log", "/nonexistent.log"]])
def test_missing_paths_are_bad_input(cmd):
    out = cli(*cmd)
    assert out.returncode == 2 and out.stderr.startswith("error: /nonexistent")


def test_compare_two_runs(tmp_path):
    runs = sorted((ROOT / "tests" / "snapshots" / "results").iterdir())
    out = cli("compare", str(runs[0]), str(runs[-1]), "--csv", str(tmp_path / "cmp.csv"))
    assert out.returncode == 0, out.stderr
    row = next(ln for ln in out.stdout.splitlines() if ln.startswith("good-eagle3  1 "))
    assert "2.90" in row and "3.20" in row and "+10.3" in row  # accept len A, B and B's change
    import pandas as pd

    table = pd.read_csv(tmp_path / "cmp.csv")
    assert {"tok_s_a", "tok_s_b", "tok_s_delta_pct"} <= set(table.columns)
