"""vLLM behind the engine seam (docs/vllm.md): `vllm serve` argv with --speculative-config, readiness over
/health, run-scoped acceptance from /metrics counter deltas, the SpecDecoding / engine stats log lines and
per-request spec stats (0.29.0+)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from harness.engines.base import (
    DrafterCheck,
    LaunchCheck,
    ParserAnswer,
    PreflightInput,
    ScheduleBand,
    SpecShape,
    wrong_algorithm_first,
)
from harness.engines.http import installed_version
from harness.engines.vllm import launch, metrics, preflight, schedule, spec
from harness.engines.vllm.admin import Admin
from harness.engines.vllm.config_text import spec_facts
from harness.engines.vllm.logline import parse_line
from harness.engines.vllm.preflight import STAND_IN_VERSION
from harness.inputs.engine_options import VLLMOptions

if TYPE_CHECKING:
    from harness.common.findings import Finding
    from harness.common.logwindow import LogWindow
    from harness.inputs.config import Plan, Variant
    from harness.inputs.plan_parts import Target as NodeConfig
    from harness.inputs.run_settings import RunSettings
    from harness.targets.base import Target

# uvicorn's line once the app (and so the engine) is up, printed by every vLLM release read
READY_LINE = "Application startup complete."


# the drafter-inert alarm's likely causes on vLLM (harness.analysis.alarms)
INERT_WRONG = '--speculative-config method "eagle" on an EAGLE-3 head (use "eagle3")'
INERT_CAUSES = ("a head trained for another target (hidden size, vocab or tokenizer)",
                "aux layer ids other than the head was trained on: vLLM reads only the head config's "
                "top-level eagle_aux_hidden_state_layer_ids, else the target's default layers (vllm#50170)",
                "a missing d2t/t2d vocab map, or random weights")

class VLLMEngine:
    name = "vllm"
    display_name = "vLLM"
    stand_in_version = STAND_IN_VERSION
    ready_line = READY_LINE
    phase_columns = tuple(metrics.COLUMNS)
    accept_needs_flush = False  # acceptance is a /metrics counter delta over the phase
    api_key_env = "VLLM_API_KEY"  # entrypoints/openai/api_server.py: `args.api_key or envs.VLLM_API_KEY`
    api_key_file_flag = None
    options_model = VLLMOptions

    def options(self, node: NodeConfig) -> VLLMOptions:
        return node.vllm

    async def detect_version(self, plan: Plan, target: Target) -> str | None:
        t = plan.target
        if t.simulated:  # the stand-in answers as 0.33.0, or as the release the plan pins (sim/vllm/args.py)
            return t.vllm.pinned or STAND_IN_VERSION
        if t.vllm.pinned:
            return t.vllm.pinned
        return await installed_version(target, t.python, "vllm", "vLLM")

    def launcher_argv(self, node: NodeConfig) -> list[str]:
        return launch.launcher_argv(node)

    def launch_argv(self, plan: Plan, variant: Variant, port: int, version: str | None) -> list[str]:
        return launch.build_launch_argv(plan, variant, port, version)

    def admin(self, base_url: str, api_key: str | None = None) -> Admin:
        return Admin(base_url, api_key)

    def parse_log_line(self, text: str, line_no: int) -> LogWindow | None:
        return parse_line(text, line_no)

    def expected_on_stop(self, line: str) -> bool:
        return False  # vLLM's TERM shutdown logs nothing that reads like a crash (as far as is known)

    def server_accept_len(self, info: dict[str, Any] | None) -> float | None:
        return None  # declared: vLLM has no run-scoped figure in a snapshot; phase_server_means has the delta

    def server_provenance(self, info: dict[str, Any] | None) -> dict[str, Any]:
        if not info:
            return {}
        out: dict[str, Any] = {"vllm_version": info.get("version"), "server_version": info.get("version")}
        dev = info.get("server_info") or {}
        if isinstance(dev, dict) and dev.get("vllm_config"):
            out["server_vllm_config"] = str(dev["vllm_config"])[:2000]
            out.update(spec_facts(dev["vllm_config"]))  # as SGLang's server_speculative_* facts
        return out

    def last_gen_throughput(self, info: dict[str, Any] | None) -> float | None:
        return None  # declared: vLLM reports it only in its log lines (the "stats" windows)

    def phase_server_means(self, before: object, after: object) -> dict[str, float | str | None]:
        return metrics.phase_means(before, after)  # its own scrapes (Admin.histograms)

    def spec_mode(self, run: RunSettings, variant: Variant, version: str | None) -> str:
        return spec.spec_mode(run, variant, version)

    def spec_request_extra(self, mode: str) -> dict[str, Any] | None:
        return None  # the server flag turns the stats on; the request asks only for usage (always sent)

    def request_spec(self, spec_stats: dict[str, Any] | None, output_tokens: int | None) -> dict[str, Any]:
        return spec.request_spec(spec_stats, output_tokens)

    # vLLM forces acceptance through the speculative config (rejection_sample_method "synthetic",
    # vllm-project/vllm#40662), not the environment: declared unsupported here
    def forced_acceptance(self, env: dict[str, str]) -> float | None:
        return None

    def forced_env(self, accept_len: float) -> dict[str, str]:
        return {}

    async def ask_parser(self, pre: PreflightInput) -> ParserAnswer:
        return await preflight.ask_parser(pre)

    def launch_findings(self, check: LaunchCheck) -> list[Finding]:
        return preflight.launch_findings(check)

    def checkpoint_findings(self, check: DrafterCheck) -> list[Finding]:
        return []  # declared: no vLLM release rule on a head's checkpoint is known (aux: drafter_findings)

    def drafter_findings(self, check: DrafterCheck) -> list[Finding]:
        return preflight.drafter_findings(check)

    def algorithm_flag(self, algorithm: str) -> str:
        return f'--speculative-config method "{launch.METHODS.get(algorithm.upper(), algorithm.lower())}"'

    def inert_causes(self, algorithm: str) -> list[str]:
        uses = 'method "eagle"' if algorithm.upper() == "EAGLE" else None
        return wrong_algorithm_first(INERT_WRONG, INERT_CAUSES, uses)

    def spec_grid(self, steps: Iterable[int], topks: Iterable[int],
                  draft_tokens: Iterable[int]) -> list[SpecShape]:
        return launch.spec_grid(steps, topks, draft_tokens)

    def schedule_export(self, bands: Sequence[ScheduleBand], *, algorithm: str, draft_path: str | None,
                        version: str | None) -> dict[str, Any]:
        return schedule.schedule_export(bands, algorithm=algorithm, draft_path=draft_path, version=version)


VLLM = VLLMEngine()
