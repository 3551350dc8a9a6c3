"""Plan and drafter files: shipped data, validation rules, reference resolution, the YAML line map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from harness.common.errors import InputError
from harness.inputs import config
from harness.inputs.config import REPO_ROOT, Drafter, Plan, load_drafter, load_plan
from harness.inputs.suites import Suite, load_suite
from harness.inputs.yamlio import LineMap, format_field, load_yaml

PLANS = sorted((REPO_ROOT / "plans").glob("*.yaml"))
DRAFTERS = sorted((REPO_ROOT / "drafters").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path_factory, monkeypatch):
    # Resolution also searches ./drafters and ./suites: run from an empty directory unless a test sets one up.
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def base_plan(**overrides: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "name": "t",
        "model": {"path": "/models/m"},
        "variants": [
            {"name": "baseline"},
            {
                "name": "spec",
                "drafter": "kimi-k25-eagle3-10k",
                "num_steps": 3,
                "eagle_topk": 1,
                "num_draft_tokens": 4,
            },
        ],
        "suites": ["smoke"],
    }
    plan.update(overrides)
    return plan


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8"
    )
    return path


def load(tmp_path: Path, data: Any) -> Plan:
    return load_plan(write(tmp_path / "plan.yaml", data))


def error(tmp_path: Path, data: Any) -> InputError:
    with pytest.raises(InputError) as info:
        load(tmp_path, data)
    return info.value


# ---------------------------------------------------------------- shipped files


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_shipped_plans_load(path: Path):
    plan = load_plan(path)
    assert plan.source_path == path
    assert sum(v.is_baseline for v in plan.variants) == len({v.engine for v in plan.variants})  # per engine
    assert all(s.prompts for s in plan.suites)


@pytest.mark.parametrize("path", DRAFTERS, ids=[p.name for p in DRAFTERS])
def test_shipped_drafters_load(path: Path):
    drafter = load_drafter(path)
    assert drafter.name == path.stem
    assert drafter.algorithm == "EAGLE3"


def test_kimi_node_plan():
    plan = load_plan(REPO_ROOT / "plans" / "kimi-k25-node.yaml")
    assert plan.target.host == "gpu-node" and not plan.target.is_local and not plan.target.simulated
    assert (plan.model.tp_size, plan.model.trust_remote_code) == (8, True)
    assert plan.run.concurrency == [1, 8]
    assert [s.name for s in plan.suites] == ["smoke", "categories"]
    assert plan.baseline.name == "baseline"
    spec = [v for v in plan.variants if not v.is_baseline]
    assert {v.drafter.name for v in spec if v.drafter} == {"kimi-k25-eagle3-10k", "aq-medai-kimi-k2-eagle3"}
    for v in spec:
        assert (v.spec_algorithm, v.num_steps, v.eagle_topk, v.num_draft_tokens, v.cuda_graph) == (
            "EAGLE3",
            3,
            1,
            4,
            True,
        )
    aq = load_drafter(REPO_ROOT / "drafters" / "aq-medai-kimi-k2-eagle3.yaml")
    assert "Kimi-K2" in (aq.trained_for or "") and "K2.5" not in (aq.trained_for or "")


def test_demo_plan():
    plan = load_plan(REPO_ROOT / "plans" / "demo.yaml")
    t = plan.target
    assert (t.host, t.simulated, t.sglang.launcher) == ("local", True, ["{python}", "-m", "harness.sim"])
    assert [v.name for v in plan.variants] == [
        "baseline",
        "good-eagle3",
        "seed-weak-eagle3",
        "wrong-flag-eagle",
    ]
    good, weak, wrong = (
        plan.variant("good-eagle3"),
        plan.variant("seed-weak-eagle3"),
        plan.variant("wrong-flag-eagle"),
    )
    assert (good.spec_algorithm, good.num_steps, good.eagle_topk, good.num_draft_tokens, good.cuda_graph) == (
        "EAGLE3",
        3,
        1,
        4,
        True,
    )
    assert (weak.num_draft_tokens, weak.cuda_graph) == (16, False)
    assert weak.num_steps * weak.eagle_topk + 1 >= weak.num_draft_tokens
    assert wrong.spec_algorithm == "EAGLE" and wrong.drafter == good.drafter
    assert good.drafter.algorithm == "EAGLE3"  # the wrong flag is on the variant, the checkpoint is EAGLE-3
    for path in [plan.model.path, good.drafter.path, weak.drafter.path]:
        assert not Path(path).is_absolute() and path.startswith("demo-models/")
    assert [s.name for s in plan.suites] == ["smoke"] and plan.run.concurrency == [1, 4]


def test_every_field_is_documented():
    def models(cls: type[BaseModel], seen: set) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name} has no description"
            for sub in _models_in(field.annotation):
                models(sub, seen)

    models(Plan, set())


def _models_in(tp: Any) -> list[type[BaseModel]]:
    from typing import get_args

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in get_args(tp) for m in _models_in(a)]


# ---------------------------------------------------------------- resolution


def _drafter_file(directory: Path, marker: str) -> None:
    write(directory / "mine.yaml", {"name": "mine", "path": f"/ckpt/{marker}"})


def test_resolution_order(tmp_path, monkeypatch):
    project, cwd = tmp_path / "project", tmp_path / "cwd"
    plan_path = write(
        project / "plans" / "p.yaml", base_plan(variants=[{"name": "b"}, {"name": "s", "drafter": "mine"}])
    )
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for where, marker in [
        (project / "plans", "plan-dir"),
        (project / "drafters", "sibling"),
        (cwd / "drafters", "cwd"),
    ]:
        _drafter_file(where, marker)

    order = []
    for leftover in [project / "plans", project / "drafters", cwd / "drafters"]:
        order.append(load_plan(plan_path).variant("s").drafter.path)
        (leftover / "mine.yaml").unlink()
    assert order == ["/ckpt/plan-dir", "/ckpt/sibling", "/ckpt/cwd"]
    with pytest.raises(InputError) as info:
        load_plan(plan_path)
    searched = [
        str((project / "plans").resolve()),
        str((project / "drafters").resolve()),
        str((cwd / "drafters").resolve()),
        str(REPO_ROOT / "drafters"),
    ]
    assert all(d in info.value.message for d in searched)
    assert (info.value.field, info.value.line) == ("variants[1].drafter", 7)


def test_repository_directories_come_last(tmp_path):
    shadow = write(Path.cwd() / "drafters" / "kimi-k25-eagle3-10k.yaml", {"path": "/ckpt/cwd-copy"})
    assert load(tmp_path, base_plan()).variant("spec").drafter.path == "/ckpt/cwd-copy"
    shadow.unlink()
    plan = load(tmp_path, base_plan())
    assert plan.variant("spec").drafter == load_drafter(REPO_ROOT / "drafters" / "kimi-k25-eagle3-10k.yaml")
    assert plan.suites[0] == load_suite(REPO_ROOT / "suites" / "smoke.yaml")


def test_references_by_path(tmp_path):
    write(tmp_path / "elsewhere" / "d.yml", {"path": "/ckpt/rel"})
    write(tmp_path / "abs.yaml", {"name": "abs", "path": "/ckpt/abs", "algorithm": "eagle"})
    write(tmp_path / "s.yaml", {"prompts": [{"id": 1, "text": "hi"}]})
    plan = load(
        tmp_path,
        base_plan(
            variants=[
                {"name": "b"},
                {"name": "rel", "drafter": "elsewhere/d"},
                {"name": "abs", "drafter": str(tmp_path / "abs.yaml")},
            ],
            suites=["s.yaml", str(REPO_ROOT / "suites" / "long-output.yaml")],
        ),
    )
    assert plan.variant("rel").drafter.path == "/ckpt/rel" and plan.variant("rel").drafter.name == "d"
    assert plan.variant("abs").spec_algorithm == "EAGLE"
    assert [s.name for s in plan.suites] == ["s", "long-output"]


def test_inline_drafter_and_suite(tmp_path):
    plan = load(
        tmp_path,
        base_plan(
            variants=[{"name": "b"}, {"name": "i", "drafter": {"name": "inline", "path": "/x"}}],
            suites=[{"name": "inline", "prompts": [{"id": "a", "text": "hello"}]}],
        ),
    )
    assert plan.variant("i").drafter == Drafter(name="inline", path="/x")
    assert plan.suites[0] == Suite(name="inline", prompts=[{"id": "a", "text": "hello"}])


def test_errors_inside_a_referenced_file_name_that_file(tmp_path):
    write(tmp_path / "bad-drafter.yaml", "name: x\npath: /p\nalgorithm: EAGLE9\n")
    err = error(tmp_path, base_plan(variants=[{"name": "b"}, {"name": "s", "drafter": "bad-drafter"}]))
    assert (Path(err.path).name, err.line, err.field) == ("bad-drafter.yaml", 3, "algorithm")


def test_resolved_dict_round_trips(tmp_path):
    plan = load_plan(REPO_ROOT / "plans" / "kimi-k25-node.yaml")
    data = json.loads(json.dumps(plan.resolved_dict()))
    assert data["variants"][1]["drafter"]["path"] == "/models/drafters/kimi-k25-eagle3-10k"
    assert data["suites"][0]["prompts"][0]["id"] == "code-lru-cache"
    again = Plan.model_validate(data)
    assert again.model_dump() == plan.model_dump()
    assert again.baseline.name == "baseline" and again.source_path is None


# ---------------------------------------------------------------- validation rules


def test_variant_properties(tmp_path):
    plan = load(
        tmp_path,
        base_plan(
            variants=[
                {"name": "baseline"},
                {"name": "auto-params", "drafter": "kimi-k25-eagle3-10k"},
                {"name": "mtp", "algorithm": "nextn"},
                {
                    "name": "ngram",
                    "algorithm": "NGram",
                    "num_steps": 4,
                    "eagle_topk": 1,
                    "num_draft_tokens": 5,
                },
            ]
        ),
    )
    assert plan.baseline.name == "baseline" and plan.baseline.spec_algorithm is None
    auto = plan.variant("auto-params")
    assert (auto.spec_algorithm, auto.num_steps, auto.is_baseline, auto.cuda_graph) == (
        "EAGLE3",
        None,
        False,
        True,
    )
    assert plan.variant("mtp").spec_algorithm == "NEXTN" and plan.variant("mtp").drafter is None
    assert plan.variant("ngram").spec_algorithm == "NGRAM"


@pytest.mark.parametrize("algorithm", ["EAGLE3", "standalone", "DFlash"])
def test_algorithms_that_need_a_drafter(tmp_path, algorithm):
    err = error(tmp_path, base_plan(variants=[{"name": "b"}, {"name": "x", "algorithm": algorithm}]))
    assert err.field == "variants[1].algorithm" and "needs a drafter" in err.message


def test_eagle_on_an_eagle3_drafter_is_left_to_preflight(tmp_path):
    plan = load(
        tmp_path,
        base_plan(
            variants=[{"name": "b"}, {"name": "w", "drafter": "demo-good-eagle3", "algorithm": "EAGLE"}]
        ),
    )
    assert plan.variant("w").spec_algorithm == "EAGLE"


@pytest.mark.parametrize(
    "given",
    [
        ("num_steps",),
        ("eagle_topk",),
        ("num_draft_tokens",),
        ("num_steps", "eagle_topk"),
        ("eagle_topk", "num_draft_tokens"),
    ],
)
def test_spec_params_all_or_none(tmp_path, given):
    variant = {"name": "s", "drafter": "kimi-k25-eagle3-10k", **{p: 2 for p in given}}
    err = error(tmp_path, base_plan(variants=[{"name": "b"}, variant]))
    missing = [p for p in config.SPEC_PARAMS if p not in given]
    assert err.field == f"variants[1].{given[0]}"
    assert f"missing {', '.join(missing)}" in err.message and "SGLang asserts" in err.message


def test_baseline_rules(tmp_path):
    two = base_plan(variants=[{"name": "a"}, {"name": "b", "extra_args": ["--x"]}])
    assert "more than one baseline ('a', 'b')" in error(tmp_path, two).message
    marked = base_plan(variants=[{"name": "a"}, {"name": "b", "baseline": True}])
    assert "more than one baseline" in error(tmp_path, marked).message  # 'a' is one too unless marked false
    fixed = base_plan(variants=[{"name": "a", "baseline": False}, {"name": "b", "baseline": True}])
    assert load(tmp_path, fixed).baseline.name == "b"
    none = base_plan(variants=[{"name": "s", "drafter": "kimi-k25-eagle3-10k"}])
    assert (error(tmp_path, none).field, "no baseline" in error(tmp_path, none).message) == ("variants", True)
    spec_marked = base_plan(
        variants=[{"name": "b"}, {"name": "s", "drafter": "kimi-k25-eagle3-10k", "baseline": True}]
    )
    assert error(tmp_path, spec_marked).field == "variants[1].baseline"


@pytest.mark.parametrize(
    ("section", "key", "value", "field", "words"),
    [
        ("model", "tp_size", 0, "model.tp_size", "greater than 0"),
        ("model", "tp_size", True, "model.tp_size", "expected an integer, got true"),
        ("model", "tp_size", 2.5, "model.tp_size", "expected an integer, got 2.5"),
        ("run", "max_tokens", -1, "run.max_tokens", "greater than 0"),
        ("run", "repeats", 0, "run.repeats", "at least 1"),
        ("run", "warmup_requests", -1, "run.warmup_requests", "at least 0"),
        ("run", "temperature", -0.1, "run.temperature", "at least 0"),
        ("run", "concurrency", [], "run.concurrency", "a run needs a concurrency level or a request rate"),
        ("run", "concurrency", [2, 0], "run.concurrency[1]", "greater than 0"),
        ("run", "concurrency", [4, 4], "run.concurrency[1]", "listed twice"),
        ("run", "endpoint", "grpc", "run.endpoint", "'chat' or 'completions'"),
        ("run", "per_request_spec", "on", "run.per_request_spec", "'auto' or 'off'"),
        ("server", "decode_log_interval", 0, "server.decode_log_interval", "at least 1"),
        ("server", "port", 0, "server.port", "1 to 65535"),
        ("server", "port", 65536, "server.port", "1 to 65535"),
        ("server", "port", "8000", "server.port", "1 to 65535"),
        ("server", "mem_fraction_static", 0, "server.mem_fraction_static", "greater than 0"),
        ("server", "startup_timeout_s", 0, "server.startup_timeout_s", "greater than 0"),
        ("server", "cuda_graph_max_bs", 0, "server.cuda_graph_max_bs", "greater than 0"),
        ("run", "request_timeout_s", -5, "run.request_timeout_s", "greater than 0"),
        ("target", "ssh_port", 0, "target.ssh_port", "at least 1"),
        ("target", "sglang_version", "latest", "target.sglang_version", "'0.5.15'"),
        ("target", "launcher", [], "target.launcher", "must not be empty"),
        ("target", "env", {"A B": "1"}, "target.env.A B", "not an environment variable name"),
        ("target", "env", {"X": ["1"]}, "target.env.X", "expected a string, got a list"),
    ],
)
def test_value_rules(tmp_path, section, key, value, field, words):
    err = error(tmp_path, base_plan(**{section: {**base_plan().get(section, {}), key: value}}))
    assert err.field == field
    assert words in err.message


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("server", "port", 1),
        ("server", "port", 65535),
        ("server", "port", "auto"),
        ("run", "warmup_requests", 0),
        ("run", "temperature", 0),
    ],  # engine versions: tests/test_engine_options.py
)
def test_boundary_values_accepted(tmp_path, section, key, value):
    plan = load(tmp_path, base_plan(**{section: {**base_plan().get(section, {}), key: value}}))
    assert getattr(getattr(plan, section), key) == value


def test_numbers_become_strings_where_argv_and_env_need_them(tmp_path):
    plan = load(
        tmp_path,
        base_plan(
            target={"env": {"CUDA_VISIBLE_DEVICES": 0}},
            model={"path": "/m", "extra_args": ["--chunked-prefill-size", 8192, 0.5]},
        ),
    )
    assert plan.target.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert plan.model.extra_args == ["--chunked-prefill-size", "8192", "0.5"]
    assert (
        "expected a string, got true"
        in error(tmp_path, base_plan(model={"path": "/m", "extra_args": [True]})).message
    )


@pytest.mark.parametrize("name", ["a b", "a/b", "../x", ".hidden", "-flag", "", "ü"])
def test_bad_variant_names(tmp_path, name):
    err = error(
        tmp_path, base_plan(variants=[{"name": "baseline"}, {"name": name, "drafter": "kimi-k25-eagle3-10k"}])
    )
    assert err.field == "variants[1].name"


def test_good_variant_names_and_case_insensitive_duplicates(tmp_path):
    ok = load(
        tmp_path,
        base_plan(
            variants=[{"name": "Base_1.0-x"}, {"name": "k25.eagle3", "drafter": "kimi-k25-eagle3-10k"}]
        ),
    )
    assert [v.name for v in ok.variants] == ["Base_1.0-x", "k25.eagle3"]
    err = error(
        tmp_path,
        base_plan(
            variants=[
                {"name": "baseline"},
                {"name": "Spec", "drafter": "kimi-k25-eagle3-10k"},
                {"name": "spec", "drafter": "kimi-k25-eagle3-10k"},
            ]
        ),
    )
    lines = (tmp_path / "plan.yaml").read_text().splitlines()
    assert err.field == "variants[2].name" and lines[err.line - 1].endswith("- name: spec")
    assert "duplicate variant name 'spec' (also variants[1])" in err.message


def test_unknown_fields_suggest_or_list(tmp_path):
    near = error(tmp_path, base_plan(server={"max_running_request": 8}))
    assert near.message == "unknown field 'max_running_request' (did you mean 'max_running_requests'?)"
    far = error(tmp_path, base_plan(run={"zzz": 1}))
    assert far.message.startswith("unknown field 'zzz'; allowed: concurrency, max_tokens")


def test_missing_plan_and_wrong_top_level(tmp_path):
    with pytest.raises(InputError) as info:
        load_plan(tmp_path / "nope.yaml")
    assert info.value.message == "file not found"
    assert "expected a mapping" in error(tmp_path, "just a string\n").message
    assert error(tmp_path, "").message == "file is empty"


def test_several_problems_report_the_first_in_file_order(tmp_path):
    text = ("name: t\nmodel:\n  path: /m\n  tp_size: -1\nvariants:\n  - name: baseline\nsuites: [smoke]\n"
            "run:\n  repeats: 0\n")
    err = error(tmp_path, text)
    assert (err.line, err.field) == (4, "model.tp_size")
    assert err.message.endswith("(and 1 more problem)")


# ---------------------------------------------------------------- yamlio


def test_line_map_and_nearest_ancestor(tmp_path):
    data, lines = load_yaml(
        write(tmp_path / "a.yaml", "a: 1\nlist:\n  - x: 1\n  -\n    y: 2\n    z: [3, 4]\n")
    )
    assert data == {"a": 1, "list": [{"x": 1}, {"y": 2, "z": [3, 4]}]}
    assert lines.line_of(("a",)) == 1
    assert lines.line_of(("list", 0, "x")) == 3
    assert lines.line_of(("list", 1, "z")) == 6
    assert lines.line_of(("list", 1, "missing", 7)) == 5  # the item's first line
    assert LineMap().line_of(("x",)) is None


def test_duplicate_keys_are_errors_even_nested_and_numeric(tmp_path):
    with pytest.raises(InputError) as info:
        load_yaml(write(tmp_path / "d.yaml", "env:\n  1: a\n  2: b\n  1: c\n"))
    assert (info.value.line, info.value.field, info.value.message) == (
        4,
        "env.1",
        "duplicate key '1' (first set on line 2)",
    )


def test_merge_keys_may_be_overridden(tmp_path):
    data, _ = load_yaml(write(tmp_path / "m.yaml", "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n"))
    assert data["d"] == {"x": 3, "y": 2}


def test_bom_is_accepted_and_bad_utf8_is_located(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_bytes("\ufeffa: é\n".encode())
    assert load_yaml(path)[0] == {"a": "é"}
    path.write_bytes(b"a: 1\nb: 2\nc: caf\xe9\n")
    with pytest.raises(InputError) as info:
        load_yaml(path)
    assert (info.value.line, info.value.message) == (
        3,
        "not valid UTF-8 (byte 0xe9 at column 7); save the file as UTF-8",
    )


def test_python_tags_are_refused_and_nesting_is_bounded(tmp_path):
    with pytest.raises(InputError) as info:
        load_yaml(write(tmp_path / "t.yaml", "a: 1\nb: !!python/object/apply:os.system [echo hi]\n"))
    assert info.value.line == 2 and "could not determine a constructor" in info.value.message
    with pytest.raises(InputError) as info:
        load_yaml(write(tmp_path / "n.yaml", "a: " + "[" * 50_000 + "]" * 50_000 + "\n"))
    # whichever layer refuses first (draftbench's depth check, or libyaml's own limit in newer PyYAML
    # wheels), the message is draftbench's and names the line
    assert info.value.line == 1 and info.value.message == "nested more than 100 levels deep"
    for depth in (101, 1_500):  # block style: the depth check, not the scanner, refuses these
        text = "".join("  " * i + "k:\n" for i in range(depth)) + "  " * depth + "v\n"
        with pytest.raises(InputError) as info:
            load_yaml(write(tmp_path / "b.yaml", text))
        assert info.value.message == "nested more than 100 levels deep" and info.value.line is not None


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_yaml(tmp_path)
    assert info.value.message == "is a directory, expected a file"


def test_format_field():
    assert format_field(("variants", 1, "num_steps")) == "variants[1].num_steps"
    assert format_field((0, "x")) == "[0].x"
    assert format_field(()) is None


def test_engine_per_plan_and_per_variant_with_a_baseline_each(tmp_path):
    data = {"name": "p", "model": {"path": "m"},
            "suites": [{"name": "s", "prompts": [{"id": "a", "text": "x"}]}],
            "variants": [{"name": "b"}, {"name": "vb", "engine": "vllm"}]}
    plan = load(tmp_path, data)
    assert [v.engine for v in plan.variants] == ["sglang", "vllm"]
    assert plan.baseline.name == "b" and plan.baseline_of(plan.variants[1]).name == "vb"
    e = error(tmp_path, {**data, "variants": [{"name": "b"},
                                              {"name": "v", "engine": "vllm", "algorithm": "NGRAM"}]})
    assert "no baseline for engine vllm" in e.message
    e = error(tmp_path, {**data, "variants": [{"name": "b"}, {"name": "c", "engine": "trt"}]})
    assert e.field.endswith("engine")
