"""The stand-in's command line behaves like SGLang 0.5.15.post1's `launch_server` parser and
post-processing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.sim.sglang import args, flags_table
from harness.sim.sglang import resolve as res

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
SCHEDULER_KEYS = (
    "status",
    "max_total_num_tokens",
    "max_req_input_len",
    "internal_states",
    "version",
    "kv_events",
)

# Every flag draftbench's launcher may emit, with a value of SGLang's type.
DRAFTBENCH_FLAGS = [
    "--model-path",
    "m",
    "--tokenizer-path",
    "m",
    "--tp-size",
    "2",
    "--dp-size",
    "1",
    "--host",
    "127.0.0.1",
    "--port",
    "30001",
    "--trust-remote-code",
    "--mem-fraction-static",
    "0.8",
    "--max-running-requests",
    "16",
    "--context-length",
    "8k",
    "--dtype",
    "bfloat16",
    "--load-format",
    "dummy",
    "--enable-metrics",
    "--decode-log-interval",
    "10",
    "--log-level",
    "info",
    "--disable-cuda-graph",
    "--cuda-graph-max-bs-decode",
    "32",
    "--disable-prefill-cuda-graph",
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--disable-flashinfer-autotune",
    "--random-seed",
    "0",
    "--watchdog-timeout",
    "600",
    "--served-model-name",
    "tgt",
    "--chunked-prefill-size",
    "4096",
    "--speculative-algorithm",
    "eagle3",
    "--speculative-draft-model-path",
    "d",
    "--speculative-draft-load-format",
    "dummy",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--speculative-accept-threshold-single",
    "1.0",
    "--speculative-accept-threshold-acc",
    "1.0",
    "--speculative-token-map",
    "map.pt",
    "--api-key",
    "k",
    "--stream-interval",
    "1",
    "--enable-mfu-metrics",
]


def parse(*argv: str):
    return args.parse_cli(["--model-path", "m", *argv])


def test_every_draftbench_flag_parses_with_sglang_types():
    ns = args.parse_cli(DRAFTBENCH_FLAGS)
    assert ns.tp_size == 2 and ns.context_length == 8000 and ns.mem_fraction_static == 0.8
    assert ns.watchdog_timeout == 600.0 and isinstance(ns.watchdog_timeout, float)
    assert ns.disable_cuda_graph is True and ns.cuda_graph_max_bs_decode == 32
    assert ns.speculative_algorithm == "eagle3" and ns.speculative_num_draft_tokens == 4


def test_unknown_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse("--speculative-num-stepz", "3")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sglang serve") and "sglang serve: error: unrecognized arguments" in err


def test_unknown_flag_exits_2_from_the_module():
    out = subprocess.run(
        [sys.executable, "-m", "harness.sim", "--model-path", "m", "--not-a-flag"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "UserWarning: 'python -m sglang.launch_server' is still supported" in out.stderr
    assert "error: unrecognized arguments: --not-a-flag" in out.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--port", "x"], "argument --port: invalid int value: 'x'"),
        (["--attention-backend", "fa9"], "argument --attention-backend: invalid choice: 'fa9'"),
        (["--cuda-graph-max"], "ambiguous option: --cuda-graph-max could match"),
        (["--context-length", "1.5Ki"], "Decimals are not allowed with IEC suffixes"),
    ],
)
def test_bad_values_fail_like_argparse(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_required_model_path(capsys):
    with pytest.raises(SystemExit):
        args.parse_cli([])
    assert "the following arguments are required: --model-path/--model" in capsys.readouterr().err


def test_aliases_and_prefixes():
    assert parse("--tp", "4").tp_size == 4  # unique prefix, as argparse allows
    assert parse("--tensor-parallel-size", "2").tp_size == 2
    assert parse("--mem-frac", "0.5").mem_fraction_static == 0.5
    assert parse("--speculative-draft-model", "d").speculative_draft_model_path == "d"
    assert args.parse_cli(["--model", "x"]).model_path == "x"


def test_deprecated_alias_warns_and_stores(capsys):
    ns = parse("--cuda-graph-max-bs", "8", "--disable-cuda-graph")
    assert ns.cuda_graph_max_bs_decode == 8 and ns.disable_cuda_graph is True
    err = capsys.readouterr().err
    assert (
        "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead." in err
    )
    assert "'--disable-cuda-graph' is deprecated" in err


def resolve(*argv: str, arch: str = "LlamaForCausalLM"):
    return res.resolve(parse(*argv), arch, seed=0)


@pytest.mark.parametrize(
    "name, expected", [("eagle3", "EAGLE3"), ("Eagle", "EAGLE"), ("NEXTN", "EAGLE"), ("nextn", "EAGLE")]
)
def test_algorithm_names(name, expected):
    sa, _ = resolve("--speculative-algorithm", name, "--speculative-draft-model-path", "d")
    assert sa["speculative_algorithm"] == expected


def test_unknown_algorithm_raises_sglang_message():
    with pytest.raises(ValueError, match=r"^Unknown speculative algorithm name: MEDUSA$"):
        resolve("--speculative-algorithm", "medusa")


@pytest.mark.parametrize(
    "arch, expected",
    [
        ("LlamaForCausalLM", (5, 4, 8)),
        ("Qwen2ForCausalLM", (3, 1, 4)),
        ("DeepseekV3ForCausalLM", (3, 1, 4)),
        ("Grok1ForCausalLM", (5, 4, 8)),
    ],
)
def test_auto_choice_by_target_architecture(arch, expected):
    sa, notes = resolve("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", arch=arch)
    got = (sa["speculative_num_steps"], sa["speculative_eagle_topk"], sa["speculative_num_draft_tokens"])
    assert got == expected
    assert sa["max_running_requests"] == 48 and notes[0] == res.MAX_RUNNING_MSG


def test_mtp_target_uses_itself_as_draft():
    sa, _ = resolve("--speculative-algorithm", "NEXTN", arch="DeepseekV3ForCausalLM")
    assert sa["speculative_draft_model_path"] == "m" and sa["speculative_algorithm"] == "EAGLE"


@pytest.mark.parametrize(
    "given", [["--speculative-eagle-topk", "1"], ["--speculative-num-draft-tokens", "4"]]
)
def test_all_three_or_none(given):
    with pytest.raises(AssertionError) as e:
        resolve("--speculative-algorithm", "EAGLE3", *given)
    assert str(e.value) == ""  # SGLang's assert carries no message


def test_topk_one_forces_chain_length():
    sa, notes = resolve(
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "8",
        "--max-running-requests",
        "8",
    )
    assert sa["speculative_num_draft_tokens"] == 4 and sa["max_running_requests"] == 8
    assert notes == [
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1"
    ]


def test_baseline_resolution_and_graph_config():
    sa, notes = resolve("--cuda-graph-max-bs-decode", "16")
    assert notes == [] and sa["speculative_algorithm"] is None and sa["max_running_requests"] is None
    assert sa["served_model_name"] == "m" and sa["tokenizer_path"] == "m"
    dec = sa["cuda_graph_config"]["decode"]
    assert dec["backend"] == "full" and dec["bs"] == [1, 2, 4, 8, 12, 16]
    spec, _ = resolve(
        "--cuda-graph-max-bs-decode",
        "16",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
    )
    assert spec["cuda_graph_config"]["decode"]["bs"] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    off, _ = resolve("--disable-cuda-graph")
    assert off["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert resolve()[0]["cuda_graph_config"]["decode"]["max_bs"] == 256  # H200, tp < 4


def test_fields_follow_the_real_server_info_order():
    info = json.loads((FIX / "probe-baseline.json").read_text())["before/get_server_info"]["json"]
    assert list(flags_table.FIELDS) == [k for k in info if k not in SCHEDULER_KEYS]


def test_server_args_repr_matches_the_captured_log_line():
    info = json.loads((FIX / "probe-eagle3.json").read_text())["before/get_server_info"]["json"]
    fields = {k: v for k, v in info.items() if k not in SCHEDULER_KEYS}
    line = next(
        x for x in (FIX / "server-eagle3.log").read_text().splitlines() if "server_args=ServerArgs(" in x
    )
    assert line.split("server_args=", 1)[1] == res.server_args_repr(fields)


def test_capture_flags_resolve_to_the_captured_values():
    """The launch line of the EAGLE-3 capture gives the server args the real server reported."""
    launch = (FIX / "server-eagle3.log").read_text().splitlines()[0].split("launch_server ", 1)[1].split()
    sa, _ = res.resolve(args.parse_cli(launch), "LlamaForCausalLM", seed=0)
    info = json.loads((FIX / "probe-eagle3.json").read_text())["before/get_server_info"]["json"]
    differing = {k for k in sa if sa[k] != info[k]}
    assert differing == set(), {k: (sa[k], info[k]) for k in differing}
