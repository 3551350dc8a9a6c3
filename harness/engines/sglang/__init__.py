"""SGLang behind the engine seam: launch argv and flag spellings by version, readiness, the admin
endpoints, /metrics, decode-log windows and per-request spec stats (REFERENCE.md)."""

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
from harness.engines.sglang import launch, preflight, prom, schedule, shutdown, spec
from harness.engines.sglang.admin import Admin, avg_spec_accept_length
from harness.engines.sglang.logparse import parse_line
from harness.engines.sglang.preflight import STAND_IN_VERSION
from harness.inputs.engine_options import SGLangOptions

if TYPE_CHECKING:
    from harness.common.findings import Finding
    from harness.common.logwindow import LogWindow
    from harness.inputs.config import Plan, Variant
    from harness.inputs.plan_parts import Target as NodeConfig
    from harness.inputs.run_settings import RunSettings
    from harness.targets.base import Target

READY_LINE = "The server is fired up and ready to roll!"

_PROVENANCE_KEYS = ("version", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "speculative_draft_model_path", "max_running_requests",
                    "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "disable_cuda_graph",
                    "attention_backend", "decode_log_interval", "tp_size")


# the drafter-inert alarm's likely causes on SGLang (harness.analysis.alarms)
INERT_WRONG = "--speculative-algorithm EAGLE on an EAGLE-3 drafter (use EAGLE3)"
INERT_CAUSES = ("a drafter trained for another target (hidden size, vocab or tokenizer)",
                "aux layer ids the target does not capture (custom ids under CUDA graphs on SGLang ≤ 0.5.10)",
                "a missing d2t/t2d vocab map, or random weights (--speculative-draft-load-format dummy)")

class SGLangEngine:
    name = "sglang"
    display_name = "SGLang"
    stand_in_version = STAND_IN_VERSION
    ready_line = READY_LINE
    phase_columns = tuple(prom.COLUMNS)
    accept_needs_flush = True
    # SGLang reads its key from no variable (srt/server_args.py: api_key is a plain server arg), but reads its
    # server args from `--config FILE` (srt/server_args_config_parser.py, .yaml/.yml/.json)
    api_key_env = None
    api_key_file_flag = "--config"
    options_model = SGLangOptions

    def options(self, node: NodeConfig) -> SGLangOptions:
        return node.sglang

    async def detect_version(self, plan: Plan, target: Target) -> str | None:
        """The version that decides flag spellings: the stand-in's, the plan's pin, or asked on the target."""
        t = plan.target
        pinned = t.sglang.pinned
        # the stand-in answers as 0.5.15, or as a later release the plan pins (sim resolve.py)
        if t.simulated:
            return pinned or STAND_IN_VERSION
        if pinned:
            return pinned
        return await installed_version(target, t.python, "sglang", "SGLang")

    def launcher_argv(self, node: NodeConfig) -> list[str]:
        return launch.launcher_argv(node)

    def launch_argv(self, plan: Plan, variant: Variant, port: int, version: str | None) -> list[str]:
        return launch.build_launch_argv(plan, variant, port, version)

    def admin(self, base_url: str, api_key: str | None = None) -> Admin:
        return Admin(base_url, api_key)

    def parse_log_line(self, text: str, line_no: int) -> LogWindow | None:
        return parse_line(text, line_no)

    def expected_on_stop(self, line: str) -> bool:
        return shutdown.expected_on_stop(line)

    def server_accept_len(self, info: dict[str, Any] | None) -> float | None:
        return avg_spec_accept_length(info)

    def server_provenance(self, info: dict[str, Any] | None) -> dict[str, Any]:
        if not info:
            return {}
        out = {("sglang_version" if k == "version" else f"server_{k}"): info.get(k)
               for k in _PROVENANCE_KEYS if k in info}
        if "version" in info:
            out["server_version"] = info["version"]  # the engine-neutral name the runner reads
        return out

    def last_gen_throughput(self, info: dict[str, Any] | None) -> float | None:
        states = (info or {}).get("internal_states") or []
        vals = [s.get("last_gen_throughput") for s in states if isinstance(s, dict)]
        vals = [v for v in vals if isinstance(v, int | float)]
        return sum(vals) if vals else None

    def phase_server_means(self, before: object, after: object) -> dict[str, float | None]:
        return prom.phase_means(before, after)  # its own scrapes (Admin.histograms)

    def spec_mode(self, run: RunSettings, variant: Variant, version: str | None) -> str:
        return spec.spec_mode(run, variant, version)

    def spec_request_extra(self, mode: str) -> dict[str, Any] | None:
        return {"return_spec_tokens_details": True} if mode == "stream" else None

    def request_spec(self, spec_stats: dict[str, Any] | None, output_tokens: int | None) -> dict[str, Any]:
        return spec.request_spec(spec_stats, output_tokens)

    def forced_acceptance(self, env: dict[str, str]) -> float | None:
        return spec.forced_acceptance(env)

    def forced_env(self, accept_len: float) -> dict[str, str]:
        return spec.forced_env(accept_len)

    # preflight (harness.checks asks these; the rules are SGLang's)
    async def ask_parser(self, pre: PreflightInput) -> ParserAnswer:
        return await preflight.ask_parser(pre)

    def launch_findings(self, check: LaunchCheck) -> list[Finding]:
        return preflight.launch_findings(check)

    def checkpoint_findings(self, check: DrafterCheck) -> list[Finding]:
        return preflight.checkpoint_findings(check)

    def drafter_findings(self, check: DrafterCheck) -> list[Finding]:
        return preflight.drafter_findings(check)

    def algorithm_flag(self, algorithm: str) -> str:
        return f"--speculative-algorithm {algorithm}"

    def inert_causes(self, algorithm: str) -> list[str]:
        uses = algorithm.upper() if algorithm.upper() in ("EAGLE", "NEXTN") else None
        return wrong_algorithm_first(INERT_WRONG, INERT_CAUSES, uses)

    def spec_grid(self, steps: Iterable[int], topks: Iterable[int],
                  draft_tokens: Iterable[int]) -> list[SpecShape]:
        return launch.spec_grid(steps, topks, draft_tokens)

    def schedule_export(self, bands: Sequence[ScheduleBand], *, algorithm: str, draft_path: str | None,
                        version: str | None) -> dict[str, Any]:
        return schedule.schedule_export(bands, algorithm=algorithm, draft_path=draft_path, version=version)


SGLANG = SGLangEngine()
