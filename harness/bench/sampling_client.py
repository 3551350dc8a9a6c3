"""A variant's sampling arm on every request it sends (harness.inputs.sampling): the replay client wrapped so
that the timed phases, the warmup and the spec probe all go out at the arm's sampler."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from harness.client.collect import StreamResult
    from harness.client.stream import ReplayClient, ReplayRequest
    from harness.inputs.config import Plan, Variant
    from harness.inputs.sampling import SamplingArm


class SamplingClient:
    """`client` (harness.client.stream.ReplayClient) with the arm's fields merged into every request body."""

    def __init__(self, client: ReplayClient, arm: SamplingArm) -> None:
        self.client = client
        self.fields = arm.request_fields()
        self.temperature = float(arm.temperature)

    def _at_arm(self, req: ReplayRequest) -> ReplayRequest:
        return replace(req, temperature=self.temperature,
                       extra_body={**(req.extra_body or {}), **self.fields})

    async def stream(self, req: ReplayRequest) -> StreamResult:
        return await self.client.stream(self._at_arm(req))

    async def complete_meta(self, req: ReplayRequest) -> dict | None:
        return await self.client.complete_meta(self._at_arm(req))

    async def complete_meta_text(self, req: ReplayRequest) -> tuple[str, dict] | None:
        return await self.client.complete_meta_text(self._at_arm(req))

    def __getattr__(self, name: str) -> Any:  # everything else (aclose, endpoint, model) as the client has it
        return getattr(self.client, name)


def with_sampling(client: ReplayClient, variant: Variant) -> ReplayClient:
    """The client a variant replays through: wrapped where the variant has a sampling arm (the wrapper answers
    every call of the client's, at the arm's sampler)."""
    arm = variant.sampling
    return client if arm is None else cast("ReplayClient", SamplingClient(client, arm))


def variant_temperature(plan: Plan, variant: Variant) -> float:
    arm = variant.sampling
    return float(arm.temperature if arm is not None else plan.run.temperature)


def any_greedy(plan: Plan) -> bool:
    """Whether any variant replays greedily (then outputs.csv is kept for the output check)."""
    return any(variant_temperature(plan, v) == 0.0 for v in plan.variants)
