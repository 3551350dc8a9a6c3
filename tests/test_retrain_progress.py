"""Every SpecForge progress format in REFERENCE §8.5, record splitting on `\\r`, and the folded state."""

from __future__ import annotations

import math

import pytest

from harness.retrain.progress import (
    ProgressState,
    RecordSplitter,
    parse_interval,
    parse_line,
    parse_postfix,
    parse_rate,
)


def test_reference_tqdm_line_v020():
    u = parse_line(
        "Training Epoch 0:  12%|█▏        | 1203/10000 [10:02<1:13:20,  2.00it/s, "
        "loss=4.21, acc=0.52, time=0.50s]"
    )
    assert (u.kind, u.phase, u.epoch, u.step, u.total) == ("bar", "train", 0, 1203, 10000)
    assert u.elapsed_s == 602 and u.eta_s == 4400 and u.rate == 2.0
    assert u.metrics == {"loss": 4.21, "acc": 0.52, "time": 0.5}


def test_tqdm_2026_postfix_with_acceptance_rate_and_grad_norm():
    u = parse_line(
        "Training Epoch 3:  50%|█████     | 50/100 [00:25<00:25,  1.99it/s, loss=1.07, acc=0.71, "
        "acceptance_rate=0.64, time=0.50s, grad_norm=0.33]"
    )
    assert u.epoch == 3 and u.step == 50
    assert u.metrics == {"loss": 1.07, "acc": 0.71, "acceptance_rate": 0.64, "time": 0.5, "grad_norm": 0.33}


def test_tqdm_slow_rate_long_eta_and_first_draw():
    u = parse_line(
        "Training Epoch 1:   0%|          | 3/83000 [00:30<230:31:40, 10.00s/it, loss=9.10, acc=0.01]"
    )
    assert u.rate == pytest.approx(0.1) and u.eta_s == 230 * 3600 + 31 * 60 + 40
    first = parse_line("Training Epoch 1:   0%|          | 0/83000 [00:00<?, ?it/s]")
    assert first.step == 0 and first.eta_s is None and first.rate is None and first.metrics == {}


def test_tqdm_eval_bar_head_bar_and_unknown_total():
    ev = parse_line("Evaluating Epoch 2:  40%|████      | 4/10 [00:02<00:03,  1.90it/s]")
    assert (ev.phase, ev.epoch, ev.step, ev.total) == ("eval", 2, 4, 10)
    head = parse_line("Training:  12%|█▏        | 120/1000 [00:10<01:13, 12.00step/s]")
    assert (head.phase, head.epoch, head.step, head.total, head.rate) == ("train", None, 120, 1000, 12.0)
    open_ended = parse_line("Training Epoch 0: 57it [00:12,  4.61it/s, loss=3.20, acc=0.40]")
    assert (open_ended.step, open_ended.total, open_ended.rate) == (57, None, 4.61)
    assert open_ended.metrics["loss"] == 3.2


def test_v010_epoch_metric_prints():
    acc = parse_line("Train Epoch [2/10], position 3,  Acc: 0.45")
    assert (acc.kind, acc.phase, acc.epoch, acc.num_epochs, acc.metrics) == (
        "metrics",
        "train",
        1,
        10,
        {"acc_3": 0.45},
    )
    ploss = parse_line("Eval Epoch [2/10], position 0, pLoss: 1.23")
    assert (ploss.phase, ploss.metrics) == ("eval", {"ploss_0": 1.23})


def test_v020_eval_step_lines_with_logging_prefix():
    a = parse_line(
        "[2026-01-05 10:00:00] INFO specforge.utils: Eval - Step 5000 [5001/10], position 2,  Acc: 0.61"
    )
    assert (a.kind, a.step, a.num_epochs, a.phase, a.metrics) == ("metrics", 5000, 10, None, {"acc_2": 0.61})
    p = parse_line("Eval - Step 5000 [5001/10], position 6, pLoss: 2.3456789012")
    assert p.metrics == {"ploss_6": pytest.approx(2.3456789012)}
    r = parse_line("Eval - Step 5000 [5001/10], position 0,  Acceptance Rate: 0.8123")
    assert r.metrics == {"acceptance_rate_0": 0.8123}


def test_head_step_dict_with_perf_lists_and_nonfinite_values():
    line = (
        "step 10: {'acc_0': 0.71, 'acc_1': 0.6, 'ploss_0': 1.2, 'acc': 0.55, 'loss': 4.1, "
        "'acceptance_rate_0': 0.7, 'acceptance_rate': 0.6, 'grad_norm': nan, 'lr': 9.9e-05, "
        "'perf/optimizer_steps_per_hour': 7200.0, 'perf/optimizer_step_time_s': 0.5, "
        "'per_pos': [0.5, 0.25], 'max': inf}"
    )
    u = parse_line(line)
    assert (u.kind, u.step, u.phase) == ("metrics", 10, "train")
    assert u.metrics["acc"] == 0.55 and u.metrics["loss"] == 4.1 and u.metrics["lr"] == 9.9e-05
    assert u.metrics["per_pos_0"] == 0.5 and u.metrics["per_pos_1"] == 0.25
    assert math.isnan(u.metrics["grad_norm"]) and math.isinf(u.metrics["max"])
    assert u.rate == pytest.approx(2.0)  # from the optimizer step time


def test_lifecycle_lines():
    s = parse_line("Saved full training state to /out/run/epoch_1_step_4000/training_state.pt")
    assert (s.kind, s.path, s.epoch, s.step) == ("saved", "/out/run/epoch_1_step_4000", 1, 4000)
    v01 = parse_line("Saved model configuration to /out/run/epoch_3")
    assert (v01.path, v01.epoch, v01.step) == ("/out/run/epoch_3", 3, None)
    c = parse_line("Training completed at step 12345, saving final checkpoint...")
    assert (c.kind, c.step) == ("completed", 12345)
    st = parse_line("Starting training from epoch:2          step:8000")
    assert (st.kind, st.epoch, st.step) == ("started", 2, 8000)
    r = parse_line("Restored optimizer/scheduler state: epoch=2, step=8000, lr=0.000087")
    assert (r.kind, r.epoch, r.step, r.metrics) == ("restored", 2, 8000, {"lr": 0.000087})
    e = parse_line("exported sglang draft to /out/run/kimi-step800-sglang")
    assert (e.kind, e.path) == ("exported", "/out/run/kimi-step800-sglang")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Loading checkpoint shards: done",
        "step 3: not a dict",
        "[2026-01-05] WARNING something happened",
        "top 32000 token frequency ratio: 91.2%",
    ],
)
def test_other_lines_are_not_progress(line):
    assert parse_line(line) is None


def test_small_parsers():
    assert parse_interval("1:02:03") == 3723 and parse_interval("?") is None and parse_interval("") is None
    assert parse_rate("?it/s") is None and parse_rate("4.00s/it") == 0.25
    assert parse_postfix("loss=nan, acc=x, time=1.50s") == {
        "loss": pytest.approx(float("nan"), nan_ok=True),
        "time": 1.5,
    }


def test_splitter_separates_redraws_from_lines_and_holds_partials():
    s = RecordSplitter()
    bar = "Training Epoch 0:  50%|█████     | 1/2 [00:01<00:01,  1.00it/s]"
    data = (
        "Starting training from epoch:0          step:0\n\r" + bar + "\rEval - Step 1 [2/1], pos"
    ).encode()
    cut = data.index("█".encode()) + 1  # split inside a multi-byte character
    records = s.feed(data[:cut]) + s.feed(data[cut:])
    assert records == [("Starting training from epoch:0          step:0", True), (bar, False)]
    assert s.feed(b"ition 0,  Acc: 0.50\r\n") == [("Eval - Step 1 [2/1], position 0,  Acc: 0.50", True)]
    assert s.feed(b"tail without newline") == [] and s.flush() == [("tail without newline", True)]


def test_state_eta_spans_the_remaining_epochs():
    st = ProgressState("j", num_epochs=3)
    st.feed(
        parse_line("Training Epoch 0:  50%|█████     | 50/100 [00:25<00:25,  2.00it/s, loss=2.00, acc=0.30]")
    )
    p = st.p
    assert (p.epoch, p.step, p.steps_in_epoch, p.global_step) == (0, 50, 100, 50)
    assert p.eta_s == pytest.approx(25 + 2 * 100 / 2.0)
    st.feed(parse_line("Evaluating Epoch 0:  10%|█         | 1/10 [00:01<00:09,  1.00it/s, loss=9.99]"))
    assert st.p.loss == 2.0 and st.p.phase == "eval"  # an eval bar does not overwrite the training loss
    st.feed(
        parse_line("Training Epoch 2:  90%|█████████ | 90/100 [00:45<00:05,  2.00it/s, loss=1.00, acc=0.60]")
    )
    assert st.p.global_step == 290 and st.p.eta_s == pytest.approx(5) and st.p.acc == 0.6


def test_state_eta_from_total_steps_in_the_cli_era_and_checkpoints():
    st = ProgressState("j", total_steps=1000)
    st.feed(parse_line("step 200: {'loss': 3.0, 'acc': 0.4, 'perf/optimizer_step_time_s': 0.25}"))
    assert st.p.global_step == 200 and st.p.eta_s == pytest.approx(800 * 0.25) and st.p.loss == 3.0
    p = st.feed_records(
        [
            ("Saved model configuration to /o/epoch_0_step_200", True),
            ("Saved full training state to /o/epoch_0_step_200/training_state.pt", True),
            ("Training completed at step 210, saving final checkpoint...", True),
        ]
    )
    assert p.checkpoints == ("/o/epoch_0_step_200",) and p.completed and p.global_step == 210
    assert len(p.lines) == 3
