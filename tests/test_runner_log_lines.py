"""server_windows.csv names each stats line by its line number in the run directory's copy of the log,
including the lines that arrive after the runner has stopped the server (the log follower delivers the
tail of the log late: on the H200 the last Decode line of two variants came after the stop and was
numbered from 1)."""

from __future__ import annotations

import pandas as pd

from harness.analysis.attempts import CountingAppender
from harness.bench.run_record import on_lines
from harness.bench.runner import SERVER_WINDOW_COLUMNS, _Run
from harness.inputs.config import load_plan
from harness.serve.server import Server
from harness.targets.local import LocalTarget

DECODE = ("[2026-11-29 14:41:53] Decode batch, #running-req: 1, #token: 237, token usage: 0.00, accept len: "
          "1.00, accept rate: 0.00, cuda graph: True, gen throughput (token/s): 165.75, #queue-req: 0")
NOISE = '[2026-11-29 14:41:53] INFO:     127.0.0.1:59154 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def test_lines_after_the_stop_keep_their_numbers(tmp_path):
    plan = load_plan("plans/demo.yaml")
    run = _Run(plan, results_dir=tmp_path, keep_servers=False, resume_dir=None, target=None,
               emit=lambda event: None)
    run.windows = CountingAppender(tmp_path / "server_windows.csv", SERVER_WINDOW_COLUMNS)
    server = Server(LocalTarget(), plan, plan.variant("good-eagle3"), run_id="r", run_dir=tmp_path,
                    engine_version=None)

    def deliver(lines):  # what Server._follow_into does: count, then hand on
        server.lines_seen += len(lines)
        on_lines(run, "good-eagle3", lines)

    run.servers.append(server)
    run._log_owner["good-eagle3"] = server
    deliver([NOISE] * 100 + [DECODE])  # line 101
    run.servers.remove(server)  # _stop: the server is gone from the live list...
    deliver([NOISE] * 5 + [DECODE])  # ...and the follower delivers the last lines: line 107
    rows = pd.read_csv(tmp_path / "server_windows.csv")
    assert rows.line.tolist() == [101, 107]
