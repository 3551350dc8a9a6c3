"""The stand-in started by a test (not by draftbench): for existing-endpoint and API-key tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model

ENV = {"DRAFTBENCH_SIM_TIME_SCALE": "0.05", "DRAFTBENCH_SIM_STARTUP_S": "0.05"}


@dataclass
class StandIn:
    url: str
    port: int
    proc: subprocess.Popen
    log: Path


def write_models(root: Path) -> Path:
    write_target_model(root / "target", hidden_size=64, num_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=128, vocab_size=32000)
    write_eagle3_drafter(root / "good", target_hidden_size=64, per_position=[0.9, 0.82, 0.78])
    return root


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def start_stand_in(root: Path, name: str, *flags: str) -> StandIn:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = root / f"{name}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "harness.sim", "--model-path", str(root / "target"),
                                 "--port", str(port), *flags], stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **ENV}, start_new_session=True)
    server = StandIn(f"http://127.0.0.1:{port}", port, proc, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if _status(server.url + "/health_generate") == 200:
                return server
        except OSError:
            time.sleep(0.02)  # not listening yet: poll again until the deadline
    raise TimeoutError(f"stand-in not healthy within 60 s:\n{log.read_text()}")


def spec_flags(root: Path) -> list[str]:
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(root / "good"),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            "4"]


def stop_stand_in(server: StandIn) -> None:
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGTERM)
    server.proc.wait(timeout=30)
