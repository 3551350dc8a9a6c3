"""The pure math of `draftbench tune`: accept-length histograms -> predicted accept length at every chain
length, acceptance curves, specdec_bench's speculation_profile.json, and predicted tok/s and speedup.

A histogram h is SGLang's `spec_correct_drafts_histogram`: h[j] = verify steps with exactly j correct drafts.
With eagle_topk 1 the drafts are a chain and verification keeps the longest correct prefix, so a run at
num_steps = S predicts every shorter chain k <= S: a step that got j right at S gets min(j, k) right at k:

    AL(k) = sum_j h[j] * (min(j, k) + 1) / sum_j h[j]

A tree (topk > 1) re-plans its candidates, so a chain histogram only bounds it from below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.engines.base import Engine

CONSISTENCY_TOLERANCE = 0.02  # specdec_bench's default for AL = 1 + sum of marginals
SCHEMA_VERSION = "1.0"  # specdec_bench speculation_profile.json


def parse_histogram(text: object) -> list[int]:
    """requests.csv / spec_probe.csv `spec_histogram` (space-separated counts) -> list; [] when absent."""
    if not isinstance(text, str) or not text.strip():
        return []
    return [int(float(x)) for x in text.split()]


def add_histograms(hists: Iterable[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for h in hists:
        if len(h) > len(out):
            out.extend([0] * (len(h) - len(out)))
        for j, n in enumerate(h):
            out[j] += int(n)
    return out


def steps_of(h: Sequence[int]) -> int:
    return int(sum(h))


def accept_len_at(h: Sequence[int], k: int) -> float | None:
    """Predicted accept length (drafts + bonus token per verify step) of a chain of k drafts."""
    n = steps_of(h)
    if n <= 0 or k < 0:
        return None
    return sum(c * (min(j, k) + 1) for j, c in enumerate(h)) / n


def mean_accept_len(h: Sequence[int]) -> float | None:
    """The measured accept length of the run itself (k = the longest observed)."""
    return accept_len_at(h, max(0, len(h) - 1))


def marginal_rates(h: Sequence[int], positions: int | None = None) -> list[float]:
    """P(accepted >= k) for k = 1..positions: the chance that the first k drafts are all accepted."""
    n = steps_of(h)
    positions = max(0, len(h) - 1) if positions is None else positions
    if n <= 0:
        return [0.0] * positions
    tail, out = n, []
    for k in range(1, positions + 1):
        tail -= h[k - 1] if k - 1 < len(h) else 0
        out.append(max(0, tail) / n)
    return out


def conditional_rates(h: Sequence[int], positions: int | None = None) -> list[float]:
    """P(draft k accepted | drafts < k accepted) for k = 1..positions (0 where nothing reached k-1)."""
    marg = marginal_rates(h, positions)
    prev, out = 1.0, []
    for m in marg:
        out.append(m / prev if prev > 0 else 0.0)
        prev = m
    return out


def collapse_position(h: Sequence[int], threshold: float = 0.5, positions: int | None = None) -> int | None:
    """First draft position whose conditional acceptance falls below `threshold` (None: never)."""
    for k, c in enumerate(conditional_rates(h, positions), start=1):
        if c < threshold:
            return k
    return None


def check_consistency(h: Sequence[int], positions: int | None = None) -> dict:
    """specdec_bench's check: the per-step mean equals 1 + the sum of the marginals (when nothing is cut)."""
    measured = mean_accept_len(h) or 0.0
    implied = 1.0 + sum(marginal_rates(h, positions))
    delta = abs(implied - measured)
    return {"implied_mean_accept_length": round(implied, 6),
            "reported_mean_accept_length": round(measured, 6),
            "abs_delta": round(delta, 6), "tolerance": CONSISTENCY_TOLERANCE,
            "passed": delta <= CONSISTENCY_TOLERANCE}


def speculation_profile(h: Sequence[int], num_steps: int, *, method: str = "eagle3",
                        per_category: dict[str, Sequence[int]] | None = None,
                        per_request_mean: float | None = None, draft_checkpoint: dict | None = None,
                        target_model: dict | None = None, conditions: dict | None = None) -> dict:
    """speculation_profile.json in the schema NVIDIA's specdec_bench writes (conditional and marginal
    per-position accept rates, checked against the per-step mean accept length)."""
    marg = marginal_rates(h, num_steps)
    cond = conditional_rates(h, num_steps)
    mean = mean_accept_len(h)
    violations = [{"position": i, "value": marg[i], "previous": marg[i - 1]}
                  for i in range(1, len(marg)) if marg[i] > marg[i - 1] + 1e-9]
    return {
        "schema_version": SCHEMA_VERSION,
        "measured": bool(steps_of(h)),
        "method": method.lower(),
        "draft_checkpoint": draft_checkpoint,
        "target_model": target_model,
        "num_speculative_tokens": num_steps,
        "block_size": None,
        "max_supported_k": num_steps,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(x, 6) for x in cond],
        "marginal_accept_rates": [round(x, 6) for x in marg],
        "mean_accept_length": round(mean, 6) if mean is not None else None,
        "mean_accept_length_per_request": (round(per_request_mean, 6) if per_request_mean is not None
                                           else None),
        "accept_length_model": "chain_analytic",
        "accept_length_by_k": {str(k): round(accept_len_at(h, k) or 0.0, 6) for k in range(1, num_steps + 1)},
        # keyed by acceptance length (correct drafts + the bonus token), as specdec_bench keys it
        "acceptance_length_histogram": {str(j + 1): int(c) for j, c in enumerate(h) if c},
        "per_category": {cat: {"mean_accept_length": round(mean_accept_len(ch) or 0.0, 6),
                               "conditional_accept_rates": [round(x, 6)
                                                            for x in conditional_rates(ch, num_steps)],
                               "marginal_accept_rates": [round(x, 6) for x in marginal_rates(ch, num_steps)],
                               "verify_steps": steps_of(ch)}
                         for cat, ch in sorted((per_category or {}).items())} or None,
        "measurement_conditions": conditions,
        "validation": {"mean_consistency": check_consistency(h, num_steps),
                       "marginal_monotonicity": {"passed": not violations, "violations": violations}},
    }


# ------------------------------------------------------------------------------------------ grid + prediction


@dataclass(frozen=True, order=True)
class Config:
    """One speculative configuration; SGLang fixes all four at launch."""

    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    cuda_graph: bool

    @property
    def name(self) -> str:
        graph = "g" if self.cuda_graph else "eager"
        return f"s{self.num_steps}-k{self.eagle_topk}-d{self.num_draft_tokens}-{graph}"

    @property
    def depth(self) -> int:
        """Longest acceptable chain: num_steps drafts, limited by the tree size."""
        return max(0, min(self.num_steps, self.num_draft_tokens - 1))


def build_grid(engine: Engine, steps: Iterable[int], topks: Iterable[int], draft_tokens: Iterable[int],
               graphs: Iterable[bool]) -> list[Config]:
    """Every config the engine accepts (its `spec_grid`: the shapes it launches), with and without graphs."""
    graphs = list(graphs)
    return sorted({Config(s.num_steps, s.eagle_topk, s.num_draft_tokens, g)
                   for s in engine.spec_grid(steps, topks, draft_tokens) for g in graphs})


def predicted_accept_len(h: Sequence[int], cfg: Config) -> float | None:
    """Chain prediction; for a tree (topk > 1) the same number is a lower bound."""
    return accept_len_at(h, cfg.depth)


def decode_tok_s(accept_len: float, batch: int, step_ms: float) -> float:
    """Steady-decode throughput of a batch: accept_len tokens per request per step."""
    return accept_len * batch / step_ms * 1000.0


def predicted_speedup(accept_len: float, step_ms: float, base_step_ms: float) -> float:
    """Tokens per unit time against the baseline's decode step at the same batch."""
    return accept_len * base_step_ms / step_ms


def break_even_accept_len(step_ms: float, base_step_ms: float) -> float:
    """The accept length at which a config's step cost exactly matches the baseline."""
    return step_ms / base_step_ms


def prior_step_ms(cfg: Config, batch: int, measured: dict[Config, dict[int, float]]) -> float | None:
    """A guess of an unmeasured config's step cost at `batch`, to order candidates (never reported as
    measured): linear in num_steps between the nearest measured configs of the same topk/graph setting,
    scaled by the graph on/off ratio seen at a measured pair when none of the same setting exists."""
    def points(pred) -> list[tuple[int, float]]:
        return sorted((c.num_steps, v[batch]) for c, v in measured.items()
                      if batch in v and pred(c))

    same = points(lambda c: c.eagle_topk == cfg.eagle_topk and c.cuda_graph == cfg.cuda_graph
                  and (cfg.eagle_topk == 1 or c.num_draft_tokens == cfg.num_draft_tokens))
    if not same:
        same = points(lambda c: c.eagle_topk == cfg.eagle_topk and c.cuda_graph == cfg.cuda_graph)
    if same:
        return _interpolate(same, cfg.num_steps)
    other = points(lambda c: c.eagle_topk == cfg.eagle_topk and c.cuda_graph != cfg.cuda_graph)
    if not other:
        other = points(lambda c: c.cuda_graph != cfg.cuda_graph) or points(lambda c: True)
    if not other:
        return None
    return _interpolate(other, cfg.num_steps) * _graph_ratio(cfg.cuda_graph, batch, measured)


def _interpolate(points: list[tuple[int, float]], x: int) -> float:
    if len(points) == 1:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1 and x1 != x0:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = (points[0], points[1]) if x < points[0][0] else (points[-2], points[-1])
    slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
    return max(1e-6, y1 + slope * (x - x1)) if x > x1 else max(1e-6, y0 + slope * (x - x0))


def _graph_ratio(graph: bool, batch: int, measured: dict[Config, dict[int, float]]) -> float:
    """Step cost with graphs `graph` over the other setting, from configs measured both ways (1.0: none)."""
    ratios = []
    for c, v in measured.items():
        twin = Config(c.num_steps, c.eagle_topk, c.num_draft_tokens, not c.cuda_graph)
        if c.cuda_graph == graph and twin in measured and batch in v and batch in measured[twin]:
            ratios.append(v[batch] / measured[twin][batch])
    return sum(ratios) / len(ratios) if ratios else 1.0


def with_schedule(profile: dict, crossover_concurrency: dict[str, float | str | None],
                  schedule: list[dict]) -> dict:
    """The profile with draftbench's crossover (per config: the batch where it stops paying, ">N" when it
    pays at every batch tried, 0 when it never pays) and its per-batch-size schedule (`max_batch`,
    `num_steps`, `eagle_topk`, `num_draft_tokens` per band; num_steps 0: speculation off)."""
    keys = ("max_batch", "num_steps", "eagle_topk", "num_draft_tokens")
    return {**profile, "crossover_concurrency": dict(crossover_concurrency),
            "schedule": [{k: b[k] for k in keys} | {"cuda_graph": b.get("cuda_graph")} for b in schedule]}
