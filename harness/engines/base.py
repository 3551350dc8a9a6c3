"""The engine seam: what the run pipeline, the analysis and the preflight ask of a serving engine.

An engine package (`harness.engines.sglang`, later others) implements `Engine`; nothing above this layer
names an engine. A capability an engine lacks is declared (`None`, "off"), never a missing branch.
Contract tests every engine must pass: tests/test_engine_contract.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

# Per-request speculative stats, normalised: the keys every engine's `request_spec` returns.
REQUEST_SPEC_KEYS = ("spec_verify_ct", "spec_accept_len", "spec_correct_drafts", "spec_proposed_drafts",
                     "spec_histogram")
SPEC_MODES = ("stream", "meta_info", "off")


@runtime_checkable
class EngineAdmin(Protocol):
    """The engine's own endpoints on one server (base URL without /v1)."""

    async def healthy(self, timeout: float = 10.0) -> bool: ...
    async def flush_cache(self, timeout: float = 30.0) -> bool: ...
    async def server_info(self, timeout: float = 30.0) -> dict[str, Any] | None: ...
    async def histograms(self, timeout: float = 10.0) -> Any: ...  # opaque scrape, fed to phase_server_means
    async def model_id(self, timeout: float = 10.0) -> str | None: ...
    async def close(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    name: str                 # "sglang"
    display_name: str         # "SGLang", as tables and reports print it
    stand_in_version: str     # the version the project's stand-in of this engine reproduces
    ready_line: str           # the log line that says the server is ready (readiness is still asked over HTTP)
    phase_columns: Sequence[str]  # server-side per-phase columns (phase_server_means keys)
    accept_needs_flush: bool  # True: the server's accept length is cumulative until a flush (SGLang);
    #                           False: it is a counter delta over the phase and needs none (vLLM)
    api_key_env: str | None   # the variable the server reads its API key from (vLLM: VLLM_API_KEY); None: it
    #                           reads none and gets it in a 0600 file named by `api_key_file_flag` (SGLang)
    api_key_file_flag: str | None  # SGLang's `--config FILE` (a JSON of server args); None where api_key_env is set

    async def detect_version(self, plan: Any, target: Any) -> str | None: ...
    def launcher_argv(self, target: Any) -> list[str]: ...
    def launch_argv(self, plan: Any, variant: Any, port: int, version: str | None) -> list[str]: ...
    def admin(self, base_url: str, api_key: str | None = None) -> EngineAdmin: ...

    # live log: one window per stats line (None for any other line)
    def parse_log_line(self, text: str, line_no: int) -> Any: ...
    # a line the engine writes when draftbench stops it (SIGTERM) that reads like a crash (False: none known)
    def expected_on_stop(self, line: str) -> bool: ...

    # run-scoped figures from the admin endpoints (before/after a phase)
    def server_accept_len(self, info: dict[str, Any] | None) -> float | None: ...
    def server_provenance(self, info: dict[str, Any] | None) -> dict[str, Any]: ...  # has "server_version"
    def last_gen_throughput(self, info: dict[str, Any] | None) -> float | None: ...
    def phase_server_means(self, before: Any, after: Any) -> dict[str, float | None]: ...

    # per-request speculative stats
    def spec_mode(self, run: Any, variant: Any, version: str | None) -> str: ...  # one of SPEC_MODES
    def spec_request_extra(self, mode: str) -> dict[str, Any] | None: ...
    def request_spec(self, spec: dict[str, Any] | None, output_tokens: int | None) -> dict[str, Any]: ...
    # the accept length a server started with `env` is forced to (a benchmarking switch: its outputs are not
    # the model's), None when not forced; `forced_env` is the env that forces `accept_len`
    def forced_acceptance(self, env: dict[str, str]) -> float | None: ...
    def forced_env(self, accept_len: float) -> dict[str, str]: ...

    # preflight: the engine's own parser judges each argv, then its flag rules (harness.checks asks)
    async def ask_parser(self, plan: Any, target: Any, env: Any, arch: str | None,
                         pinned: str | None) -> tuple[dict[str, list[str]], dict[str, Any], str | None, list]: ...
    def launch_findings(self, plan: Any, variant: Any, argv: list[str], base_argv: list[str] | None,
                        parsed: Any, version: str | None, arch: str | None, max_batch: int) -> list: ...
    def drafter_findings(self, variant: str, argv: list[str], aux_ids: list[Any] | None,
                         target_layers: int | None, version: str | None,
                         draft_config: dict[str, Any] | None = None) -> list: ...
