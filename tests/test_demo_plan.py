"""plans/demo.yaml (relative model paths, simulated) works in every command, from any directory, with a fresh
HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.cli.demo import load_ready_plan

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "plans" / "demo.yaml"


def cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_the_demo_plan_gets_its_checkpoints_under_the_results_dir(tmp_path):
    plan = load_ready_plan(DEMO, tmp_path / "r")
    workdir = Path(plan.target.workdir)
    assert workdir == (tmp_path / "r" / ".demo-target").resolve()
    for sub in ("target", "good-eagle3", "seed-weak-eagle3"):
        assert (workdir / "demo-models" / sub / "config.json").exists()
    stamp = (workdir / "demo-models" / "target" / "config.json").stat().st_mtime_ns
    again = load_ready_plan(DEMO, tmp_path / "r")  # a second command reuses them, nothing rewritten
    assert again.target.workdir == str(workdir)
    assert (workdir / "demo-models" / "target" / "config.json").stat().st_mtime_ns == stamp


def test_a_real_plan_is_left_alone(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\ntarget: {host: local, workdir: /nowhere}\nmodel: {path: rel/model}\n"
                    "variants: [{name: baseline}]\nsuites: [smoke]\n")
    assert load_ready_plan(plan, tmp_path / "r").target.workdir == "/nowhere"
    assert not (tmp_path / "r").exists()


def test_check_from_another_directory_with_a_fresh_home(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), cwd.mkdir()
    out = cli("check", str(DEMO), "--json", cwd=cwd, home=home)
    assert out.returncode == 0, out.stderr  # nothing about missing files; the wrong-flag arm is expected
    found = json.loads(out.stdout)["findings"]
    assert not [f for f in found if f["severity"] == "error"]
    assert [(f["severity"], f["code"]) for f in found if f["variant"] == "wrong-flag-eagle"] == [
        ("info", "eagle3-drafter-with-eagle")]
    assert (cwd / "results" / ".demo-target" / "demo-models" / "target" / "config.json").exists()



def test_the_engines_demo_plan_passes_its_check_and_says_vllms_flag(tmp_path):
    # its header says `draftbench run plans/demo-engines.yaml`; that run stopped in preflight on the
    # wrong-method arm until the plan said it expects it, and the finding named SGLang's flag for vLLM
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), cwd.mkdir()
    out = cli("check", str(ROOT / "plans" / "demo-engines.yaml"), "--json", cwd=cwd, home=home)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["findings"]
    assert not [f for f in found if f["severity"] == "error"]
    (wrong,) = [f for f in found if f["variant"] == "vllm-wrong-method"]
    assert (wrong["severity"], wrong["code"]) == ("info", "eagle3-drafter-with-eagle")
    assert wrong["what"].endswith('served with --speculative-config method "eagle"'), wrong["what"]
    assert 'only for --speculative-config method "eagle3"' in wrong["why"]
    assert wrong["fix"].endswith('(--speculative-config method "eagle3")')
    assert "--speculative-algorithm" not in wrong["what"] + wrong["why"] + wrong["fix"]


def test_regen_on_the_demo_plan_with_the_shipped_conversations(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), cwd.mkdir()
    out = cli("regen", str(DEMO), "--input", str(ROOT / "plans" / "demo-conversations.jsonl"),
              "--output", "out.jsonl", "--max-tokens", "16", "--concurrency", "4", cwd=cwd, home=home)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (cwd / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["conversations"][-1]["role"] == "assistant" for r in rows)


def test_a_copy_of_the_demo_plan_elsewhere_gets_them_too(tmp_path):
    """Not only plans/demo.yaml itself: any simulated plan with the demo's relative paths (tune, train,
    ...)."""
    import shutil

    copy = tmp_path / "mine" / "demo.yaml"
    copy.parent.mkdir()
    shutil.copy(DEMO, copy)
    plan = load_ready_plan(copy, tmp_path / "r")
    assert (Path(plan.target.workdir) / "demo-models" / "good-eagle3" / "config.json").exists()
