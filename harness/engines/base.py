"""The engine seam: what the run pipeline, the analysis and the preflight ask of a serving engine.

An engine package (`harness.engines.sglang`, later others) implements `Engine`; nothing above this layer
names an engine. A capability an engine lacks is declared (`None`, "off"), never a missing branch.
Contract tests every engine must pass: tests/test_engine_contract.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.common.findings import Finding
    from harness.common.logwindow import LogWindow
    from harness.inputs.config import Plan, Variant
    from harness.inputs.engine_options import EngineOptions
    from harness.inputs.plan_parts import Target as NodeConfig
    from harness.inputs.run_settings import RunSettings
    from harness.targets.base import Target

# Per-request speculative stats, normalised: the keys every engine's `request_spec` returns.
REQUEST_SPEC_KEYS = ("spec_verify_ct", "spec_accept_len", "spec_correct_drafts", "spec_proposed_drafts",
                     "spec_histogram")
SPEC_MODES = ("stream", "meta_info", "off")


# ---- what the preflight (harness.checks) and the tune (harness.studies.tune) hand an engine, and get back


@dataclass(frozen=True)
class PreflightInput:
    """What the preflight knows when it asks an engine for its variants' argv (`ask_parser`)."""

    plan: Plan
    target: Target  # the connection to the node the servers would run on
    arch: str | None  # the target model's architecture (its config.json), None when unread
    python_ok: bool  # target.python runs on the node
    workdir_exists: bool  # target.workdir is there (relative paths resolve under it)
    version: str | None = None  # this engine's version as the caller already knows it (a fleet asked it);
    #                             None: the plan's pin, else the engine asks the node


@dataclass(frozen=True)
class ParserAnswer:
    """An engine's answer to `ask_parser`: the argv of each of its variants, what its parser made of them."""

    argvs: dict[str, list[str]]  # variant name -> launch argv without the launcher (its own variants only)
    parsed: dict[str, dict[str, Any]]  # variant name -> the engine's parser's answer (empty: none was asked)
    version: str | None  # the version the argv are built for (None: unknown)
    findings: list[Finding]  # what asking found (engine missing, version unknown, an argv it cannot build)


@dataclass(frozen=True)
class LaunchCheck:
    """One variant's launch argv, for the engine's flag rules (`launch_findings`)."""

    plan: Plan
    variant: Variant
    argv: list[str]  # without the launcher
    base_argv: list[str] | None  # its baseline's argv, None for the baseline itself
    parsed: dict[str, Any] | None  # the engine's parser's answer for this variant, None when none was asked
    version: str | None
    arch: str | None
    max_batch: int  # the largest batch the run can put on the server


@dataclass(frozen=True)
class DrafterCheck:
    """A speculative variant's EAGLE-3 head as read on the target, for the engine's own rules about it."""

    variant: str
    argv: list[str]  # the variant's launch argv without the launcher
    config: dict[str, Any] | None  # the head's config.json
    aux_ids: list[Any] | None  # eagle_config.eagle_aux_hidden_state_layer_ids (SpecForge / SGLang layout)
    target_layers: int | None  # the target model's num_hidden_layers
    version: str | None  # this engine's version


@dataclass(frozen=True, order=True)
class SpecShape:
    """The speculative parameters an engine fixes at launch (the tune's grid is made of them)."""

    num_steps: int
    eagle_topk: int
    num_draft_tokens: int


@dataclass(frozen=True)
class ScheduleBand:
    """One band of a per-batch-size schedule (harness.analysis.schedule): the config for running batches
    min_batch..max_batch; num_steps 0 is speculation off (the baseline's server)."""

    max_batch: int
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    cuda_graph: bool
    min_batch: int = 1
    speedup_pred: float | None = None  # at the band's first batch tried


# ---- the seam


@runtime_checkable
class EngineAdmin(Protocol):
    """The engine's own endpoints on one server (base URL without /v1)."""

    async def healthy(self, timeout: float = 10.0) -> bool: ...
    async def flush_cache(self, timeout: float = 30.0) -> bool: ...
    async def server_info(self, timeout: float = 30.0) -> dict[str, Any] | None: ...
    async def histograms(self, timeout: float = 10.0) -> object: ...  # opaque: fed to phase_server_means
    async def model_id(self, timeout: float = 10.0) -> str | None: ...
    async def close(self) -> None: ...


def wrong_algorithm_first(wrong: str, causes: Sequence[str], uses: str | None) -> list[str]:
    """An engine's inert_causes in order: the wrong-algorithm cause first and marked as the most likely when
    the variant uses that algorithm (`uses`, as the engine spells it), else last."""
    if uses:
        return [f"{wrong}: the most likely one, this variant uses {uses}", *causes]
    return [*causes, wrong]

@runtime_checkable
class Engine(Protocol):
    name: str                 # "sglang"
    display_name: str         # "SGLang", as tables and reports print it
    stand_in_version: str     # the version the project's stand-in of this engine reproduces
    ready_line: str           # the log line that says the server is ready (readiness is still asked over
    #                           HTTP)
    phase_columns: Sequence[str]  # server-side per-phase columns (phase_server_means keys)
    accept_needs_flush: bool  # True: the server's accept length is cumulative until a flush (SGLang);
    #                           False: it is a counter delta over the phase and needs none (vLLM)
    api_key_env: str | None   # the variable the server reads its API key from (vLLM: VLLM_API_KEY); None: it
    #                           reads none and gets it in a 0600 file named by `api_key_file_flag` (SGLang)
    api_key_file_flag: str | None  # SGLang's `--config FILE` (a JSON of server args); None where
    #                                api_key_env is set
    options_model: type[EngineOptions]  # its options in a plan (`target.<name>:`: launcher, version)

    def options(self, node: NodeConfig) -> EngineOptions: ...  # this engine's options on one node
    async def detect_version(self, plan: Plan, target: Target) -> str | None: ...
    def launcher_argv(self, node: NodeConfig) -> list[str]: ...
    def launch_argv(self, plan: Plan, variant: Variant, port: int, version: str | None) -> list[str]: ...
    def admin(self, base_url: str, api_key: str | None = None) -> EngineAdmin: ...

    # live log: one window per stats line (None for any other line)
    def parse_log_line(self, text: str, line_no: int) -> LogWindow | None: ...
    # a line the engine writes when draftbench stops it (SIGTERM) that reads like a crash (False: none known)
    def expected_on_stop(self, line: str) -> bool: ...

    # run-scoped figures from the admin endpoints (before/after a phase)
    def server_accept_len(self, info: dict[str, Any] | None) -> float | None: ...
    def server_provenance(self, info: dict[str, Any] | None) -> dict[str, Any]: ...  # has "server_version"
    def last_gen_throughput(self, info: dict[str, Any] | None) -> float | None: ...
    def phase_server_means(self, before: object, after: object) -> dict[str, float | str | None]: ...

    # per-request speculative stats
    # one of SPEC_MODES
    def spec_mode(self, run: RunSettings, variant: Variant, version: str | None) -> str: ...
    def spec_request_extra(self, mode: str) -> dict[str, Any] | None: ...
    def request_spec(self, spec: dict[str, Any] | None, output_tokens: int | None) -> dict[str, Any]: ...
    # the accept length a server started with `env` is forced to (a benchmarking switch: its outputs are not
    # the model's), None when not forced; `forced_env` is the env that forces `accept_len`
    def forced_acceptance(self, env: dict[str, str]) -> float | None: ...
    def forced_env(self, accept_len: float) -> dict[str, str]: ...

    # preflight (harness.checks asks): the engine builds its variants' argv and its own parser judges them,
    # then its flag rules per variant, its version rules on an EAGLE-3 head's checkpoint (asked right after
    # the shape checks every engine shares) and its rules on the head as its argv loads it
    async def ask_parser(self, pre: PreflightInput) -> ParserAnswer: ...
    def launch_findings(self, check: LaunchCheck) -> list[Finding]: ...
    def checkpoint_findings(self, check: DrafterCheck) -> list[Finding]: ...
    def drafter_findings(self, check: DrafterCheck) -> list[Finding]: ...
    def algorithm_flag(self, algorithm: str) -> str: ...  # the algorithm as its launch flag says it
    def inert_causes(self, algorithm: str) -> list[str]: ...  # why accept len sits at 1.00 on it, the most
    #                                                            likely first

    # the speculative shapes this engine accepts from the given values (the tune's grid, before graphs)
    def spec_grid(self, steps: Iterable[int], topks: Iterable[int],
                  draft_tokens: Iterable[int]) -> list[SpecShape]: ...

    # a schedule in this engine's own terms: the launch settings per band, what it fixes at launch, and the
    # per-batch-size option of the installed version where it has one (`version` None: not known)
    def schedule_export(self, bands: Sequence[ScheduleBand], *, algorithm: str, draft_path: str | None,
                        version: str | None) -> dict[str, Any]: ...
