"""A variant served by a server that draftbench did not start (`endpoint:`): reached directly or through
the target's port forward, its settings read from the server itself, checked, measured, never stopped."""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.records import RequestRecord
from harness.analysis.store import VariantMeta
from harness.common import events as ev
from harness.engines import engine_of
from harness.inputs.endpoints import parse_endpoint
from harness.serve.kept import VariantServer
from harness.serve.server import TAIL_LINES, ServerFailed

if TYPE_CHECKING:
    from harness.engines.base import EngineAdmin
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target


class ExistingServer:
    """The `Server` interface for an endpoint draftbench only measures: no process group, no log to follow."""

    has_log = False
    key_in_log = False  # it was started with its key by someone else: no log of ours holds it
    stop_lines = 0  # never stopped by draftbench: no shutdown lines of ours

    def __init__(self, target: Target, plan: Plan, variant: Variant, *, run_dir: Path,
                 api_key: str | None = None):
        self.target = target
        self.plan = plan
        self.variant = variant
        self.name = variant.name
        self.run_dir = Path(run_dir)
        self.engine = engine_of(plan, variant)  # a vLLM endpoint in an SGLang plan is asked as vLLM
        self.api_key = api_key
        self.host, self.port = parse_endpoint(variant.endpoint)
        self.pgid: int | None = None
        self.argv: list[str] = []
        self.base_url = ""
        self.admin: EngineAdmin | None = None
        self.last_lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.lines_seen = 0

    async def start(self) -> None:
        host, lport = await self.target.forward(self.host, self.port)
        self.base_url = f"http://{host}:{lport}"
        self.admin = self.engine.admin(self.base_url, self.api_key)
        with open(self.run_dir / "servers.jsonl", "a", encoding="utf-8") as fh:  # no pgid: nothing to reap
            fh.write(json.dumps({"variant": self.name, "endpoint": self.variant.endpoint,
                                 "target": self.target.name, "state": "existing"}) + "\n")

    async def wait_ready(self, timeout: float) -> float:
        """A running server answers at once; a few tries cover a forward that is still coming up."""
        t0 = time.monotonic()
        deadline = t0 + min(timeout, 60.0)
        while True:
            if await self.admin.healthy(timeout=min(30.0, max(1.0, deadline - time.monotonic()))):
                return time.monotonic() - t0
            if time.monotonic() >= deadline:
                raise ServerFailed(self.name, f"endpoint {self.variant.endpoint} did not answer "
                                   f"{self.engine.display_name}'s health check", [])

    async def alive(self) -> bool:
        """Any HTTP answer from /health means the server is there (a 503 while busy included)."""
        with contextlib.suppress(Exception):
            status, _ = await self.admin._get("/health", 5.0)
            return status is not None
        return False

    async def stop(self, *, keep: bool = False, term_timeout: float = 20.0) -> bool:
        """Never stops it: only the client side is closed."""
        if self.admin is not None:
            await self.admin.close()
        return True


def declared_vs_served(variant: Variant, meta: VariantMeta) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the plan's variant against the server's own resolved settings (`meta` holds
    the engine's server provenance: server_speculative_algorithm, ...). Fills the variant's columns from
    the server where the plan left them out."""
    errors: list[str] = []
    warnings: list[str] = []
    facts = meta.server_facts
    if "server_speculative_algorithm" not in facts:  # unknown, not "none": the plan is taken as given
        warnings.append("the server did not say which speculative config it runs (vLLM says it at "
                        "/server_info only with VLLM_SERVER_DEV_MODE=1): the plan's settings are taken "
                        "as given")
        if variant.spec_algorithm:
            meta.algorithm = variant.spec_algorithm
        return errors, warnings
    served = facts.get("server_speculative_algorithm") or None
    if served is not None:
        served = str(served).upper()
    declared = variant.spec_algorithm
    if variant.is_baseline and served:
        errors.append(f"is the baseline but the server speculates ({served})")
    if not variant.is_baseline and not served:
        errors.append("is a speculative arm but the server runs no speculative algorithm")
    if declared and served and declared != served:
        errors.append(f"declares {declared} but the server runs {served}")
    for key, want in (("num_steps", variant.num_steps), ("eagle_topk", variant.eagle_topk),
                      ("num_draft_tokens", variant.num_draft_tokens)):
        got = facts.get(f"server_speculative_{key}")
        if want is not None and got is not None and int(got) != int(want):
            errors.append(f"declares {key} {want} but the server runs {got}")
        if got is not None and served:
            setattr(meta, key, int(got))
    if served:
        meta.algorithm = served
    steps, topk, ndt = meta.num_steps, meta.eagle_topk, meta.num_draft_tokens
    if served and topk == 1 and steps is not None and ndt is not None and int(ndt) != int(steps) + 1:
        warnings.append(f"topk 1 with {ndt} draft tokens for {steps} steps: SGLang uses steps+1 = "
                        f"{int(steps) + 1}")
    if facts.get("server_disable_cuda_graph") is True:
        meta.cuda_graph = False
        warnings.append("the server runs without CUDA graphs (--disable-cuda-graph): decode is slower")
    elif "server_disable_cuda_graph" in facts:
        meta.cuda_graph = True
    if served and not facts.get("server_speculative_draft_model_path") and served in ("EAGLE", "EAGLE3"):
        warnings.append(f"{served} without a draft model path: SGLang loads the target as its own draft")
    return errors, warnings


def check_existing(variant: Variant, meta: VariantMeta) -> list[ev.Alarm]:
    """Preflight of an existing server's resolved settings: a mismatch with the plan fails the variant
    (ServerFailed); the rest are warning alarms. Labels the variant as not started by draftbench."""
    meta.started_by_draftbench, meta.endpoint, meta.launch_command = False, variant.endpoint, ""
    errors, warnings = declared_vs_served(variant, meta)
    if errors:
        mismatch = "; ".join(errors)
        raise ServerFailed(variant.name, f"at {variant.endpoint} does not match the plan: {mismatch}", [])
    return [ev.Alarm(variant.name, "warning", "existing-server", w) for w in warnings]


async def require_auth(server: VariantServer) -> None:
    """A wrong or missing API key is an error before the first measured request, not 0 tok/s later."""
    # SGLang's admin asks (/v1/models); EngineAdmin does not declare it, and vLLM's says it at the first
    # request's 401 instead (`unauthorized`)
    authorized = getattr(server.admin, "authorized", None)
    if authorized is not None and not await authorized():
        raise ServerFailed(server.name, "answered 401 Unauthorized: its API key is missing or wrong "
                           "(plan: api_key_env; the key is read from this machine's environment)", [])


def unauthorized(variant: str, record: RequestRecord) -> None:
    """A 401 in the middle of a phase (a key rotated under us) stops the variant with the same message."""
    if record.http_status == 401:
        raise ServerFailed(variant, "answered 401 Unauthorized: its API key is missing or wrong "
                           "(plan: api_key_env)", [])


def as_served(variant: Variant, meta: VariantMeta) -> Variant:
    """`variant` as the engine should treat it: for an existing server, a copy whose algorithm is the one the
    server runs (the plan may leave it out); a server that runs none reads as one with no drafter either."""
    if not variant.is_existing:
        return variant
    served = meta.algorithm or None
    return variant.model_copy(update={"algorithm": served, "drafter": variant.drafter if served else None})
