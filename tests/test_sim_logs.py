"""Log line formats: regexes written from REFERENCE §1 (family I, 0.5.9+) must match both the real
H200 captures and what the stand-in prints."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.sim.sglang import logs

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
TS = r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d{3})?(?P<ranks>(?: [A-Z]+\d+)*)\] "
DECODE = re.compile(
    TS + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d{2}, "
    r"(?:accept len: \d+\.\d{2}, accept rate: \d+\.\d{2}, )?"
    r"cuda graph: (?:True|False), gen throughput \(token/s\): \d+\.\d{2}, #queue-req: \d+$"
)
PREFILL = re.compile(
    TS + r"Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: \d+\.\d{2}, "
    r"#running-req: \d+, #queue-req: \d+, #pending-token: \d+, cuda graph: (?:True|False), "
    r"input throughput \(token/s\): \d+\.\d{2}$"
)
ACCESS = re.compile(TS + r'INFO:     [\d.]+:\d+ - "(?:GET|POST|PUT) /\S* HTTP/1\.1" \d{3} [A-Z][A-Za-z ]+$')


def capture_lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


@pytest.mark.parametrize("name", ["server-baseline.log", "server-eagle3.log"])
def test_regexes_match_every_captured_batch_line(name):
    text = capture_lines(name)
    decode = [x for x in text if "Decode batch" in x]
    prefill = [x for x in text if "Prefill batch" in x]
    access = [x for x in text if '" HTTP/1.1' in x or 'HTTP/1.1"' in x]
    assert decode and prefill and access
    assert all(DECODE.match(x) for x in decode)
    assert all(PREFILL.match(x) for x in prefill)
    assert all(ACCESS.match(x) for x in access)
    assert all(("accept len" in x) == (name == "server-eagle3.log") for x in decode)


def test_formatters_produce_the_family_i_lines():
    spec = logs.decode_line(
        running=3,
        num_used=412,
        usage=0.0031,
        spec=(3.214, 0.7381),
        graph=True,
        gen_throughput=181.456,
        queue=2,
    )
    assert spec == (
        "Decode batch, #running-req: 3, #token: 412, token usage: 0.00, accept len: 3.21, "
        "accept rate: 0.74, cuda graph: True, gen throughput (token/s): 181.46, #queue-req: 2"
    )
    base = logs.decode_line(
        running=1, num_used=10, usage=0.0, spec=None, graph=False, gen_throughput=90.0, queue=0
    )
    pre = logs.prefill_line(
        new_seq=2,
        new_token=100,
        cached_token=5,
        usage=0.01,
        running=1,
        queue=0,
        pending_token=0,
        graph=False,
        input_throughput=1234.5,
    )
    for line, regex in ((spec, DECODE), (base, DECODE), (pre, PREFILL)):
        assert regex.match(f"[2026-01-01 00:00:00] {line}")
    assert "accept len" not in base and not spec.endswith(",")


def test_access_line_matches_the_capture_wording():
    assert (
        logs.access_line("127.0.0.1", 41072, "GET", "/health_generate", 503)
        == 'INFO:     127.0.0.1:41072 - "GET /health_generate HTTP/1.1" 503 Service Unavailable'
    )
    captured = next(x for x in capture_lines("server-eagle3.log") if "/health_generate" in x and "503" in x)
    assert captured.endswith(logs.access_line("127.0.0.1", 41072, "GET", "/health_generate", 503))


@pytest.mark.parametrize("tp, dp, expected", [(1, 1, ""), (2, 1, " TP0"), (1, 2, " DP0"), (4, 2, " DP0 TP0")])
def test_rank_prefix_only_on_scheduler_lines(tp, dp, expected):
    err = io.StringIO()
    log = logs.SimLog(sched_prefix=logs.rank_prefix(tp, dp), err=err, out=io.StringIO())
    log.info("Decode batch, ...", scheduler=True)
    log.info("The server is fired up and ready to roll!")
    sched, plain = err.getvalue().splitlines()
    m = re.match(TS, sched)
    assert m and m["ranks"] == expected
    assert re.match(TS, plain)["ranks"] == ""  # type: ignore[index]


def test_log_level_warning_silences_info_but_not_warnings():
    err = io.StringIO()
    log = logs.SimLog(err=err, out=io.StringIO(), level="warning")
    log.info("Prefill batch, ...")
    log.warning("Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1")
    assert err.getvalue().count("\n") == 1 and "Cache not flushed" in err.getvalue()


def test_millisecond_timestamps_with_sglang_log_ms(monkeypatch):
    monkeypatch.setenv("SGLANG_LOG_MS", "1")
    err = io.StringIO()
    logs.SimLog(err=err, out=io.StringIO()).info("x")
    assert re.match(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] x$", err.getvalue())
