"""A failed variant's reason in a few words (harness.analysis.failures), from the log lines SGLang (and the
stand-in, which prints the same) writes when it cannot start."""

from __future__ import annotations

from harness.analysis.failures import cause_from_log, describe_failure, failure_reason, meaningful_tail

BIND = ("[2026-12-02 13:29:41] [Errno 98] error while attempting to bind on address ('127.0.0.1', 20994): "
        "error while attempting to bind on address ('127.0.0.1', 20994): address already in use")
TQDM = "  Capturing batches (bs=1 avail_mem=12.75 GB): 100%|██████████| 51/51 [00:00<00:00, 0.00s/it]"
NO_CONFIG = ("OSError: /ckpt/draft does not appear to have a file named config.json. Checkout "
             "'https://huggingface.co//ckpt/draft/tree/main' for available files.")


def test_the_known_causes():
    assert cause_from_log(["Load weight begin.", BIND, TQDM]) == "port 20994 in use"
    assert cause_from_log(["Traceback (most recent call last):", '  File "x.py", line 1', NO_CONFIG]) == \
        "checkpoint not found: /ckpt/draft"
    assert cause_from_log(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]) == \
        "GPU out of memory"
    assert cause_from_log(["ok", "ValueError: bad --speculative-num-steps", TQDM]) == \
        "ValueError: bad --speculative-num-steps"
    assert cause_from_log([TQDM, "Init torch distributed begin."]) is None


def test_the_reason_of_a_variants_jsonl_entry():
    assert failure_reason({"status": "ok"}) is None
    assert failure_reason({"status": "failed", "failure": "exited before it became ready",
                           "last_log_lines": [BIND]}) == "port 20994 in use (exited before it became ready)"
    assert failure_reason({"status": "failed", "failure": "died during the suite", "last_log_lines": []}) == \
        "died during the suite"
    assert failure_reason({"status": "interrupted"}) == "interrupted"
    assert describe_failure("x" * 300, []).endswith("...") and len(describe_failure("x" * 300, [])) == 160


def test_progress_bars_are_never_the_tail():
    assert meaningful_tail([TQDM] * 40 + ["a", TQDM, "b"]) == ["a", "b"]
