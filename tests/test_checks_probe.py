"""The parser probe: its snippet run for real (against a fake `sglang` package with SGLang's API and rules,
and against the stand-in's parser), and the interpretation of what it reports."""

from __future__ import annotations

import subprocess
import sys

from harness.engines.sglang import parser_probe as pp
from tests.checks_helpers import TARGET, write_fake_sglang, write_target_model


def _run_probe(variants, *, sim=False, arch=None, pythonpath=None, cwd=None):
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    elif sim:
        import harness

        env["PYTHONPATH"] = str(__import__("pathlib").Path(harness.__file__).parent.parent)
    res = subprocess.run(
        [sys.executable, "-c", pp.PROBE_SNIPPET, pp.probe_request(variants, sim=sim, target_arch=arch)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    data = pp.parse_output(res.stdout)
    assert data is not None, res.stderr
    return data


def test_probe_without_sglang_reports_import_error(tmp_path):
    data = _run_probe({"v": ["--model-path", "m"]}, pythonpath=tmp_path)
    assert data["importable"] is False and "sglang" in data["error"]


def test_probe_against_fake_sglang(tmp_path):
    root = write_fake_sglang(tmp_path / "site", version="0.5.20")
    write_target_model(tmp_path / "target", **TARGET)
    base = ["--model-path", "target", "--port", "30000", "--max-running-requests", "8"]
    spec = ["--speculative-algorithm", "eagle3", "--speculative-draft-model-path", "d"]
    data = _run_probe(
        {
            "auto": base + spec,
            "partial": base + spec + ["--speculative-eagle-topk", "2"],
            "adjusted": base
            + spec
            + [
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "9",
            ],
            "renamed": base + ["--cuda-graph-max-bs", "8"],
            "no-cap": ["--model-path", "target"] + spec,
        },
        pythonpath=root,
        cwd=tmp_path,
    )
    assert data["importable"] and data["version"] == "0.5.20"
    v = data["variants"]
    assert v["auto"]["stage"] == "ok"
    assert v["auto"]["changed"]["speculative_num_steps"] == [None, 5]  # Llama target: (5, 4, 8)
    assert "speculative_num_steps" not in v["auto"]["explicit"]
    assert v["partial"]["stage"] == "post_init" and v["partial"]["error"].startswith("AssertionError")
    assert v["adjusted"]["changed"]["speculative_num_draft_tokens"] == [9, 4]
    assert "speculative_num_draft_tokens" in v["adjusted"]["explicit"]
    assert (
        v["renamed"]["stage"] == "parse" and "ambiguous option: --cuda-graph-max-bs" in v["renamed"]["error"]
    )
    assert v["no-cap"]["changed"]["max_running_requests"] == [None, 48]
    assert any("reset to 48" in w for w in v["no-cap"]["warnings"])


def test_interpret_fake_results_as_findings(tmp_path):
    root = write_fake_sglang(tmp_path / "site", version="0.5.20")
    write_target_model(tmp_path / "target", **TARGET)
    spec = ["--model-path", "target", "--speculative-algorithm", "EAGLE3"]
    data = _run_probe(
        {
            "auto": spec,
            "renamed": spec + ["--cuda-graph-max-bs", "8"],
            "adjusted": spec
            + [
                "--speculative-num-steps",
                "2",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "5",
                "--max-running-requests",
                "4",
            ],
            "partial": spec + ["--speculative-eagle-topk", "2"],
        },
        pythonpath=root,
        cwd=tmp_path,
    )
    found = {name: pp.interpret(name, r, data["version"]) for name, r in data["variants"].items()}
    renamed = [f for f in found["renamed"] if f.code == "sglang-rejects"]
    assert renamed[0].severity == "error" and renamed[0].fix == "spell it --cuda-graph-max-bs-decode"
    auto = [f for f in found["auto"] if f.code == "sglang-auto"]
    assert any("(5, 4, 8)" in f.what for f in auto)
    assert any("--max-running-requests to 48" in f.what for f in auto)
    changes = [f for f in found["adjusted"] if f.code == "sglang-changes"]
    assert [(f.severity, f.what) for f in changes] == [
        ("warning", "SGLang 0.5.20 changes --speculative-num-draft-tokens from 5 to 3")
    ]
    partial = [f for f in found["partial"] if f.code == "sglang-rejects"]
    assert partial and "all set or all unset" in partial[0].why


def test_probe_with_the_stand_in_parser(tmp_path):
    base = ["--model-path", "m", "--max-running-requests", "8"]
    data = _run_probe(
        {
            "ok": base + ["--cuda-graph-max-bs-decode", "16"],
            "bad": base + ["--no-such-flag"],
            "auto": base + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"],
        },
        sim=True,
        arch="LlamaForCausalLM",
    )
    assert data["importable"] and data["version"].startswith("0.5.15")
    v = data["variants"]
    assert v["ok"]["stage"] == "ok"
    assert v["bad"]["stage"] == "parse" and "--no-such-flag" in v["bad"]["error"]
    assert v["auto"]["changed"]["speculative_eagle_topk"] == [None, 4]


def test_interpret_pure_cases():
    assert (
        pp.interpret(
            "v",
            {
                "stage": "ok",
                "explicit": ["speculative_algorithm"],
                "changed": {"speculative_algorithm": ["eagle3", "EAGLE3"]},
            },
            "0.5.15",
        )
        == []
    )
    assert (
        pp.interpret("v", {"stage": "ok", "changed": {}, "warnings": ["x"] * 3}, None)[0].code
        == "sglang-warning"
    )
    low = pp.interpret("v", {"stage": "ok", "resolved": {"cuda_graph_max_bs": 8}}, "0.5.13", 32)
    assert [f.code for f in low] == ["cuda-graph-max-bs-low"] and "up to batch 8" in low[0].what
    assert pp.interpret("v", {"stage": "ok", "resolved": {"cuda_graph_max_bs": 256}}, "0.5.13", 32) == []
    # 0.5.14+ resolves the captured sizes into cuda_graph_config: SGLang's repr, or the stand-in's dict
    real = (
        "CudaGraphConfig(decode=PhaseConfig(backend='full', max_bs=16, bs=[1, 2, 4, 8, 16], "
        "tc_compiler='eager'), prefill=PhaseConfig(backend='breakable', max_bs=8192, bs=[4]))"
    )
    assert pp.decode_graph_max_bs({"cuda_graph_config": real, "cuda_graph_max_bs_decode": 99}) == 16
    assert pp.decode_graph_max_bs({"cuda_graph_config": real.replace("'full'", "'disabled'", 1)}) is None
    assert pp.decode_graph_max_bs({"cuda_graph_config": {"decode": {"backend": "full", "max_bs": 24}}}) == 24
    assert pp.parse_output("garbage\n" + pp.MARKER + "{not json") is None
