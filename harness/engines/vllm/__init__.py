"""vLLM behind the engine seam (docs/vllm.md): `vllm serve` argv with --speculative-config, readiness over
/health, run-scoped acceptance from /metrics counter deltas, the SpecDecoding / engine stats log lines and
per-request spec stats (0.29.0+)."""

from __future__ import annotations

from typing import Any

from harness.engines.http import installed_version
from harness.engines.vllm import launch, metrics, preflight, spec
from harness.engines.vllm.admin import Admin
from harness.engines.vllm.logline import parse_line
from harness.engines.vllm.preflight import STAND_IN_VERSION

# uvicorn's line once the app (and so the engine) is up, printed by every vLLM release read
READY_LINE = "Application startup complete."


class VLLMEngine:
    name = "vllm"
    display_name = "vLLM"
    stand_in_version = STAND_IN_VERSION
    ready_line = READY_LINE
    phase_columns = tuple(metrics.COLUMNS)
    accept_needs_flush = False  # acceptance is a /metrics counter delta over the phase
    api_key_env = "VLLM_API_KEY"  # entrypoints/openai/api_server.py: `args.api_key or envs.VLLM_API_KEY`
    api_key_file_flag = None

    async def detect_version(self, plan: Any, target: Any) -> str | None:
        t = plan.target
        if t.simulated:
            return STAND_IN_VERSION
        if t.vllm_version and t.vllm_version != "auto":
            return str(t.vllm_version)
        return await installed_version(target, str(t.python), "vllm", "vLLM")

    def launcher_argv(self, target: Any) -> list[str]:
        return launch.launcher_argv(target)

    def launch_argv(self, plan: Any, variant: Any, port: int, version: str | None) -> list[str]:
        return launch.build_launch_argv(plan, variant, port, version)

    def admin(self, base_url: str, api_key: str | None = None) -> Admin:
        return Admin(base_url, api_key)

    def parse_log_line(self, text: str, line_no: int) -> Any:
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
        return out

    def last_gen_throughput(self, info: dict[str, Any] | None) -> float | None:
        return None  # declared: vLLM reports it only in its log lines (the "stats" windows)

    def phase_server_means(self, before: Any, after: Any) -> dict[str, Any]:
        return metrics.phase_means(before, after)

    def spec_mode(self, run: Any, variant: Any, version: str | None) -> str:
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

    async def ask_parser(self, plan: Any, target: Any, env: Any, arch: str | None,
                         pinned: str | None) -> tuple[dict[str, list[str]], dict[str, Any], str | None, list]:
        return await preflight.ask_parser(plan, target, env, arch, pinned)

    def launch_findings(self, plan: Any, variant: Any, argv: list[str], base_argv: list[str] | None,
                        parsed: Any, version: str | None, arch: str | None, max_batch: int) -> list:
        return preflight.launch_findings(plan, variant, argv, base_argv, parsed, version, arch, max_batch)

    def drafter_findings(self, variant: str, argv: list[str], aux_ids: list[Any] | None,
                         target_layers: int | None, version: str | None,
                         draft_config: dict[str, Any] | None = None) -> list:
        return preflight.drafter_findings(variant, argv, aux_ids, target_layers, version, draft_config)


VLLM = VLLMEngine()
