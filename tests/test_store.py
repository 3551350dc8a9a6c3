"""The run directory's saved records (harness.analysis.store): typed, written byte for byte as the dict-built
files were, and files of earlier releases (fewer columns and keys) read back as they were written."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.analysis.rundir import PHASE_COLUMNS
from harness.analysis.store import (
    CsvAppender,
    PhaseRecord,
    TuneDecision,
    TuneState,
    VariantMeta,
    append_variant,
    read_phases,
    read_tune_state,
    read_variants,
    write_tune_state,
)
from harness.client.collect import StreamResult
from harness.engines import phase_columns

FIXTURES = Path(__file__).parent / "fixtures"
START = {"variant": "eagle3", "engine": "sglang", "engine_version": "0.5.15.post1", "baseline": False,
         "algorithm": "EAGLE3", "drafter": "good", "drafter_path": "/m/good", "num_steps": 3,
         "eagle_topk": 1, "num_draft_tokens": 4, "cuda_graph": True, "simulated": True, "status": "running",
         "temperature": 0.0, "forced_acceptance": None}
VERSION = "0.5.15.post1"
ARGV = ["python3", "-m", "harness.sim"]
URL = "http://127.0.0.1:30002"


def test_every_fixture_variant_line_reads_back_byte_for_byte():
    lines = [(f, ln) for f in sorted(FIXTURES.rglob("variants.jsonl")) for ln in f.read_text().splitlines()]
    assert len(lines) >= 20
    assert any('"engine"' not in ln for _, ln in lines)  # an older release's lines are among them
    for f, line in lines:
        assert VariantMeta.from_dict(json.loads(line)).to_line() == line, f


def test_a_variant_line_holds_what_was_learnt_in_the_order_learnt(tmp_path: Path):
    """As the runner writes one (the dicts it built before, spelled out): a failed start has no startup_s
    and no facts of a ready server; an existing server's pgid is learnt as null and written so."""
    failed = VariantMeta(**START)
    failed.port, failed.pgid, failed.launch_command = 30001, 4242, ARGV
    failed.status, failed.failure, failed.last_log_lines = "failed", "exited before it became ready", ["boom"]
    append_variant(tmp_path, failed)
    ready = VariantMeta(**{**START, "variant": "existing"})
    ready.gpus = ["simulated"]  # learnt last: still written after the launch and the server's facts
    ready.port, ready.pgid, ready.launch_command = 30002, None, []
    ready.startup_s = 0.05
    ready.server_facts.update({"sglang_version": VERSION, "server_tp_size": 1, "server_version": VERSION})
    ready.started_by_draftbench, ready.endpoint, ready.launch_command = False, URL, ""
    ready.drafter_config_sha256 = ""
    ready.per_request_spec, ready.warmup_first_s, ready.status = "stream", None, "ok"
    append_variant(tmp_path, ready)
    before = [
        {**START, "status": "failed", "port": 30001, "pgid": 4242, "launch_command": ARGV,
         "failure": "exited before it became ready", "last_log_lines": ["boom"]},
        {**START, "variant": "existing", "status": "ok", "port": 30002, "pgid": None, "launch_command": "",
         "startup_s": 0.05, "sglang_version": VERSION, "server_tp_size": 1, "server_version": VERSION,
         "started_by_draftbench": False, "endpoint": URL, "drafter_config_sha256": "",
         "gpus": ["simulated"], "per_request_spec": "stream", "warmup_first_s": None},
    ]
    assert (tmp_path / "variants.jsonl").read_text() == "".join(json.dumps(d) + "\n" for d in before)
    back = read_variants(tmp_path)
    assert back["existing"].pgid is None and "pgid" in back["existing"].model_fields_set
    assert "startup_s" not in back["eagle3"].model_fields_set and back["eagle3"].failure.startswith("exited")
    assert back["existing"].server_facts["server_tp_size"] == 1


def test_read_variants_merges_a_resumed_runs_lines_and_skips_a_cut_one(tmp_path: Path):
    path = tmp_path / "variants.jsonl"
    later = {"variant": "eagle3", "status": "ok", "vllm_version": "0.33.0"}
    cut = '{"variant": "baseline", "base'
    path.write_text(json.dumps({**START, "compile_s": 95.0}) + "\n" + cut + "\n" + json.dumps(later) + "\n")
    metas = read_variants(tmp_path)
    assert list(metas) == ["eagle3"]
    meta = metas["eagle3"]
    assert (meta.status, meta.compile_s, meta.num_steps) == ("ok", 95.0, 3)  # the last line over the earlier
    assert meta.server_facts == {"vllm_version": "0.33.0"}  # a key this release does not declare: kept


def test_no_field_is_added_at_run_time():
    with pytest.raises(ValueError):
        VariantMeta(**START).attempt = 2
    result = StreamResult(ok=True, error=None, http_status=200, t_send=1.0, t_first=1.1, t_end=1.2,
                          wall_send=0.0)
    result.turn, result.conversation_id, result.attempts = 2, "s/q", 3  # declared: the replay sets them
    with pytest.raises(AttributeError):
        result.round = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        TuneState().winner = "s3"  # type: ignore[attr-defined]


def test_phase_rows_read_back_typed(tmp_path: Path):
    engine = phase_columns()
    rec = PhaseRecord(variant="v", phase="s@c4#r1", suite="s", concurrency=4, repeat=1, requests=15,
                      errors=1, output_tokens=720, wall_s=3.25, server_accept_len=None, flush_ok=False,
                      last_gen_throughput=221.5,
                      server={"server_requests": 16.0, "server_accept_per_pos": "0.8 0.6"}, passes=2)
    with CsvAppender(tmp_path / "phases.csv", PHASE_COLUMNS) as out:
        out.append(rec.row())
    row = (tmp_path / "phases.csv").read_text().splitlines()[1]
    assert row.startswith("v,s@c4#r1,s,4,1,15,1,720,3.25,,False,221.5,16.0,")
    [back] = read_phases(tmp_path)
    # every engine's column comes back (empty ones None), numbers as numbers, "False" as False
    assert back == replace(rec, server={**dict.fromkeys(engine), **rec.server})


def test_an_older_phases_file_reads_with_what_it_has():
    # no flush_ok, no engine columns, no passes
    old = read_phases(FIXTURES / "sglang-0.5.15.post1" / "draftbench-run")
    assert old and all(p.flush_ok is None and p.passes is None and p.server == {} for p in old)
    sized = read_phases(FIXTURES / "sglang-0.5.15.post1" / "decided" / "run")
    assert {type(p.flush_ok) for p in sized} == {bool} and all(p.passes and p.passes >= 1 for p in sized)


def test_tune_state_fixtures_read_back_byte_for_byte(tmp_path: Path):
    for path in sorted(FIXTURES.rglob("tune_state.json")):
        state = read_tune_state(path.parent)
        assert state.starts > 0 and state.stop_reason
        write_tune_state(tmp_path, state)
        assert (tmp_path / "tune_state.json").read_text() == path.read_text(), path


def test_tune_state_keys_set_later_are_written_in_the_order_first_set(tmp_path: Path):
    fresh = TuneState()
    fresh.warnings, fresh.preflight_done = [], True
    fresh.adopted = ["cost/baseline"]
    fresh.decisions.append(TuneDecision("s3-k1-d4-g", 10.5, 2.0, 480.0, 1.2))
    fresh.decisions.append(TuneDecision("s5-k1-d6-g", 12.0, 0.0, 480.0, None, adopted=True))
    fresh.winners = ["s3-k1-d4-g"]
    assert list(fresh.as_dict())[8:] == ["warnings", "preflight_done", "adopted", "winners"]
    assert [list(d) for d in fresh.as_dict()["decisions"]] == [
        ["config", "spent_s", "est_cost_s", "budget_s", "expected_speedup"],
        ["config", "spent_s", "est_cost_s", "budget_s", "expected_speedup", "adopted"]]
    # resumed: a wide run that adopted a kept server before its preflight keeps that order, and a key of
    # another release stays where it was
    (tmp_path / "tune_state.json").write_text(json.dumps({"spent_s": 5.0, "adopted": ["wide/baseline"],
                                                          "note": "kept"}))
    resumed = read_tune_state(tmp_path)
    resumed.warnings, resumed.preflight_done = ["c8 too short"], True
    resumed.adopted = [*(resumed.adopted or []), "cost/baseline"]
    write_tune_state(tmp_path, resumed)
    text = (tmp_path / "tune_state.json").read_text()
    assert list(json.loads(text))[8:] == ["adopted", "note", "warnings", "preflight_done"]
    before = {**TuneState().as_dict(), "spent_s": 5.0, "adopted": ["wide/baseline", "cost/baseline"],
              "note": "kept", "warnings": ["c8 too short"], "preflight_done": True}
    assert text == json.dumps(before, indent=2) + "\n"
