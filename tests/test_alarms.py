"""Live alarms on real SGLang 0.5.15.post1 log windows (an EAGLE-3 server whose random drafter accepts
nothing) and on summary tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.alarms import AlarmTracker
from harness.engines.sglang.logparse import parse_line
from harness.inputs.config import Plan

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"


def _windows(name: str):
    lines = (FIX / name).read_text().splitlines()
    return [w for i, text in enumerate(lines, 1) if (w := parse_line(text, i)) is not None]


def _variant(name, algorithm="EAGLE3", cuda_graph=True):
    drafter = {"name": "d", "path": "/d", "algorithm": algorithm} if algorithm else None
    return {"name": name, "algorithm": algorithm, "drafter": drafter, "cuda_graph": cuda_graph}


def _plan(*variants, max_bs=None):
    """A real Plan of these variants (and a baseline when none of them is one: a plan needs it)."""
    base = [] if any(v["algorithm"] is None for v in variants) else [{"name": "baseline"}]
    return Plan.model_validate({
        "name": "alarms", "model": {"path": "/m"}, "server": {"cuda_graph_max_bs": max_bs},
        "variants": [*base, *variants], "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})


def test_inert_drafter_on_the_real_capture():
    windows = _windows("server-eagle3.log")
    decode = [w for w in windows if w.kind == "decode"]
    assert decode and any(w.accept_len != 1.0 for w in decode)  # the capture has both kinds of window
    tracker = AlarmTracker(_plan(_variant("eagle3")))
    fired_at, alarms = [], []
    for i, w in enumerate(windows):
        got = tracker.feed("eagle3", w)
        alarms += got
        fired_at += [i] * len(got)
    run, expected = 0, None
    for i, w in enumerate(windows):
        if w.kind == "decode" and w.accept_len is not None:
            run = run + 1 if w.accept_len == 1.0 else 0
            if run == 3 and expected is None:
                expected = i
    assert [(a.code, a.severity) for a in alarms] == [("drafter-inert", "error")]
    assert fired_at == [expected]
    assert "1.00 for 3 windows" in alarms[0].message and "EAGLE3" in alarms[0].message
    assert tracker.counts[("eagle3", "drafter-inert")] > 1  # kept counting, raised once


def test_wrong_flag_is_named_first_for_eagle():
    tracker = AlarmTracker({"wrong": {"algorithm": "EAGLE", "cuda_graph": True}}, inert_windows=2)
    decode = [w for w in _windows("server-eagle3.log") if w.kind == "decode" and w.accept_len == 1.0]
    alarms = [a for w in decode[:2] for a in tracker.feed("wrong", w)]
    assert len(alarms) == 1
    assert (
        alarms[0]
        .message.split("Likely causes: ")[1]
        .startswith("--speculative-algorithm EAGLE on an EAGLE-3")
    )



def test_a_vllm_variants_causes_name_vllms_flags():
    # the engines demo's wrong-method vLLM arm was told to use --speculative-algorithm EAGLE3, SGLang's flag
    plan = Plan.model_validate({
        "name": "p", "engine": "vllm", "target": {"simulated": True}, "model": {"path": "m"},
        "variants": [{"name": "base"},
                     {"name": "wrong", "algorithm": "EAGLE", "drafter": {"name": "d", "path": "d"}}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})
    tracker = AlarmTracker(plan, inert_windows=2)
    decode = [w for w in _windows("server-eagle3.log") if w.kind == "decode" and w.accept_len == 1.0]
    (alarm,) = [a for w in decode[:2] for a in tracker.feed("wrong", w)]
    causes = alarm.message.split("Likely causes: ")[1]
    assert causes.startswith('--speculative-config method "eagle" on an EAGLE-3 head (use "eagle3")')
    assert "eagle_aux_hidden_state_layer_ids" in causes and "--speculative-algorithm" not in causes
    assert "SGLang" not in causes
    # runner meta carries the engine too
    meta = AlarmTracker({"wrong": {"algorithm": "EAGLE", "engine": "vllm"}}, inert_windows=2)
    (again,) = [a for w in decode[:2] for a in meta.feed("wrong", w)]
    assert again.message == alarm.message

def test_a_non_inert_window_resets_the_run():
    line = next(t for t in (FIX / "server-eagle3.log").read_text().splitlines() if "accept len: 1.00" in t)
    inert, good = parse_line(line), parse_line(line.replace("accept len: 1.00", "accept len: 1.20"))
    tracker = AlarmTracker(_plan(_variant("v")))
    seq = [inert, inert, good, inert, inert]
    assert [a for w in seq for a in tracker.feed("v", w)] == []
    assert [a.code for a in tracker.feed("v", inert)] == ["drafter-inert"]


def test_a_drafter_that_accepts_is_not_inert_when_a_tail_reads_1_00():
    """The H200's trained head (tests/fixtures/sglang-0.5.15.post1/decided/): 4.6 tokens per step, yet the
    phase's last request, generating past its answer under ignore_eos, read accept len 1.00 for ten windows
    in a row at #running-req 1. A drafter that has accepted drafts is not inert: no alarm. A drafter that
    never accepted anything still raises it after three such windows."""
    lines = (FIX / "decided" / "pick-decode-windows.log").read_text().splitlines()
    windows = [w for w in (parse_line(t) for t in lines) if w is not None and w.kind == "decode"]
    runs, run = [], 0
    for w in windows:
        run = run + 1 if w.accept_len == 1.0 else 0
        runs.append(run)
    assert max(runs) >= 10 and max(w.accept_len for w in windows) > 4  # the tail, and the head at work
    tracker = AlarmTracker(_plan(_variant("pick")))
    assert [a for w in windows for a in tracker.feed("pick", w)] == []
    inert_only = [w for w in windows if w.accept_len == 1.0][:3]
    fresh = AlarmTracker(_plan(_variant("fresh")))
    assert [a.code for w in inert_only for a in fresh.feed("fresh", w)] == ["drafter-inert"]


def test_baseline_windows_raise_nothing():
    tracker = AlarmTracker(_plan(_variant("base", algorithm=None)))
    assert [a for w in _windows("server-baseline.log") for a in tracker.feed("base", w)] == []


def test_cuda_graph_false_while_enabled():
    line = next(
        t
        for t in (FIX / "server-eagle3.log").read_text().splitlines()
        if "Decode batch" in t and "cuda graph: True" in t and "accept len: 1.10" not in t
    )
    eager = parse_line(
        line.replace("cuda graph: True", "cuda graph: False").replace("accept len: 1.00", "accept len: 2.00")
    )
    assert eager.cuda_graph is False and eager.running_req == 1
    on = AlarmTracker(_plan(_variant("on"), _variant("off", cuda_graph=False)))
    assert [(a.code, a.severity) for a in on.feed("on", eager)] == [("cuda-graph-off", "warning")]
    assert on.feed("on", eager) == [] and on.counts[("on", "cuda-graph-off")] == 2
    assert on.feed("off", eager) == []  # graphs disabled on purpose: nothing to say
    big = parse_line(
        line.replace("cuda graph: True", "cuda graph: False").replace("#running-req: 1,", "#running-req: 40,")
    )
    capped = AlarmTracker(_plan(_variant("v"), max_bs=32))
    alarm = capped.feed("v", big)
    assert [(a.code, a.severity) for a in alarm] == [
        ("cuda-graph-off", "info")
    ] and "above cuda_graph_max_bs 32" in alarm[0].message
    learned = AlarmTracker(_plan(_variant("v")))
    learned.set_graph_max_bs("v", 32)  # from /server_info once the server is up
    assert [a.severity for a in learned.feed("v", big)] == ["info"]
    prefill = next(
        w for w in _windows("server-baseline.log") if w.kind == "prefill" and w.cuda_graph is False
    )
    assert on.feed("on", prefill) == []  # prefill runs without graphs normally


def _summary(rows):
    cols = [
        "variant",
        "concurrency",
        "algorithm",
        "baseline",
        "tok_s",
        "accept_len",
        "break_even_accept_len",
        "step_ms",
        "cuda_graph",
    ]
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def test_slower_than_baseline_with_break_even_and_step_cost():
    base_tok, slow_tok, accept = 223.0, 172.0, 1.01
    base_step, slow_step = 1000 / base_tok, 1000 * accept / 180.0
    df = _summary(
        [
            ("baseline", 1, "", True, base_tok, None, None, base_step, True),
            ("eagle3", 1, "EAGLE3", False, slow_tok, accept, accept * base_tok / slow_tok, slow_step, False),
            ("fast", 1, "EAGLE3", False, 400.0, 2.4, 2.4 * base_tok / 400.0, 5.0, True),
            ("baseline", 4, "", True, 800.0, None, None, 5.0, True),
            ("eagle3", 4, "EAGLE3", False, 900.0, 2.0, 1.8, 9.0, True),
        ]
    )
    tracker = AlarmTracker()
    alarms = tracker.compare(df)
    assert [(a.variant, a.code, a.severity) for a in alarms] == [
        ("eagle3", "slower-than-baseline", "warning")
    ]
    msg = alarms[0].message
    assert f"{slow_tok:.1f} tok/s vs the baseline's {base_tok:.1f}" in msg
    assert f"Accept len {accept:.2f}, break-even {accept * base_tok / slow_tok:.2f}" in msg
    assert f"{slow_step:.2f} ms against {base_step:.2f} ms" in msg
    assert "CUDA graphs were off" in msg
    # a drafter that accepts (1.01 > 1.00) at a config that does not pay is pointed at the search
    assert "`draftbench tune PLAN --variant eagle3` tries other num_steps, eagle_topk" in msg
    assert tracker.compare(df) == []  # once per variant and concurrency
    inert = AlarmTracker().compare(df.assign(accept_len=[None, 1.0, 2.4, None, 2.0]))
    assert "the drafter is inert" in inert[0].message and "draftbench tune" not in inert[0].message


def test_compare_after_a_csv_round_trip(tmp_path):
    df = _summary(
        [
            ("baseline", 1, "", True, 100.0, None, None, 10.0, True),
            ("spec", 1, "EAGLE3", False, 80.0, 1.5, None, None, True),
        ]
    )
    df.to_csv(tmp_path / "s.csv", index=False)
    alarms = AlarmTracker().compare(pd.read_csv(tmp_path / "s.csv"))
    assert len(alarms) == 1 and f"break-even {1.5 * 100 / 80:.2f}" in alarms[0].message


def test_slower_alarm_follows_the_verdict():
    df = _summary(
        [
            ("baseline", 8, "", True, 1000.0, None, None, 8.0, True),
            ("noise", 8, "EAGLE3", False, 800.0, 2.0, 2.5, 20.0, True),  # 0.80x, but within the noise
            ("slow", 8, "EAGLE3", False, 700.0, 1.5, 2.1, 17.0, True),
        ]
    )
    df["verdict"] = ["baseline", "within-noise", "slower"]
    df["verdict_reason"] = ["", "too short to decide: steady state of 3.7 s, under 10 s",
                            "95% CI 0.66-0.74x (t-repeats, 3 paired repeats)"]
    alarms = AlarmTracker().compare(df)
    assert [a.variant for a in alarms] == ["slow"]
    assert "95% CI 0.66-0.74x (t-repeats, 3 paired repeats)." in alarms[0].message
