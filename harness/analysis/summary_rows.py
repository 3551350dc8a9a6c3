"""The compute functions of the summary columns a row draws from its own records: one (variant,
concurrency)'s requests, phases, decode windows, probe replays and its variants.jsonl entry (a `Group`).
Each is fn(group, row) -> value, `row` holding the columns computed before it (harness.analysis.columns;
the declarations, with each column's definition: harness.analysis.summary_columns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis import acceptance
from harness.analysis.engines_table import DEFAULT_ENGINE, window_weights
from harness.analysis.failures import failure_reason as _failure_reason
from harness.analysis.records import token_itls_ms

AGREE_TOLERANCE = 0.05  # sources within 5% of each other agree


@dataclass(frozen=True, eq=False)
class Group:
    """One summary row's records."""

    name: str
    conc: int
    meta: dict[str, Any]  # the variant's variants.jsonl entry
    ph: pd.DataFrame  # its phases at this concurrency
    rq: pd.DataFrame  # their requests
    ok: pd.DataFrame  # those that succeeded
    dec: pd.DataFrame  # the decode windows of its phases
    probe: pd.DataFrame | None  # the untimed replays (spec_probe.csv)
    phase_ids: frozenset[str]

    @classmethod
    def of(cls, name: str, conc: int, requests: pd.DataFrame, phases: pd.DataFrame, windows: pd.DataFrame,
           variants: dict[str, dict[str, Any]], probe: pd.DataFrame | None) -> Group:
        ph = phases[(phases["variant"] == name) & (phases["concurrency"] == conc)] \
            if not phases.empty else phases
        rq = requests[(requests["variant"] == name) & (requests["concurrency"] == conc)] \
            if not requests.empty else requests
        ok = rq[rq["ok"].eq(True)] if not rq.empty else rq
        phase_ids = frozenset(ph["phase"]) if not ph.empty else frozenset()
        win = windows[(windows["variant"] == name) & (windows["phase"].isin(phase_ids))] \
            if not windows.empty else windows
        dec = win[win["kind"] == "decode"] if not win.empty else win
        return cls(name, conc, variants.get(name, {}), ph, rq, ok, dec, probe, phase_ids)


Row = dict[str, Any]


def _pct(series: pd.Series, q: float) -> float | None:
    s = pd.to_numeric(series, errors="coerce").dropna()
    return float(s.quantile(q)) if len(s) else None


def _mean(series: pd.Series) -> float:
    return float(pd.to_numeric(series, errors="coerce").mean())


def _weighted(values: pd.Series, weights: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce")
    w = pd.to_numeric(weights, errors="coerce").fillna(0)
    mask = v.notna() & (w > 0)
    if not mask.any():
        return None
    return float((v[mask] * w[mask]).sum() / w[mask].sum())


def _server_mean(ph: pd.DataFrame, column: str) -> float | None:
    """A server-side per-phase mean over all phases, weighted by the requests the server counted."""
    if ph.empty or column not in ph or "server_requests" not in ph:
        return None
    return _weighted(ph[column], ph["server_requests"])


def effective_draft_tokens(meta: dict[str, Any]) -> int | None:
    """Draft tokens per verify step, from the server's resolved parameters where it reported them."""
    def pick(key: str) -> int | None:
        resolved = meta.get(f"server_speculative_{key}")
        return resolved if resolved is not None else meta.get(key)

    steps, topk, ndt = pick("num_steps"), pick("eagle_topk"), pick("num_draft_tokens")
    if steps is None:
        return None
    return int(steps) + 1 if topk == 1 else int(ndt)


# --- what the variant is (variants.jsonl) ------------------------------------------------------------------

def variant(g: Group, row: Row) -> str:
    return g.name


def concurrency(g: Group, row: Row) -> int:
    return g.conc


def algorithm(g: Group, row: Row) -> str:
    return g.meta.get("algorithm", "")


def status(g: Group, row: Row) -> str:
    return g.meta.get("status", "unknown")


def failure_reason(g: Group, row: Row) -> str | None:
    return _failure_reason(g.meta)


def simulated(g: Group, row: Row) -> bool:
    return bool(g.meta.get("simulated", False))


def baseline(g: Group, row: Row) -> bool:
    return bool(g.meta.get("baseline", False))


def drafter(g: Group, row: Row) -> str:
    return g.meta.get("drafter", "")


def num_steps(g: Group, row: Row) -> int | None:
    return g.meta.get("num_steps")


def eagle_topk(g: Group, row: Row) -> int | None:
    return g.meta.get("eagle_topk")


def num_draft_tokens(g: Group, row: Row) -> int | None:
    return effective_draft_tokens(g.meta)


def cuda_graph(g: Group, row: Row) -> bool | None:
    return g.meta.get("cuda_graph")


def forced_acceptance(g: Group, row: Row) -> float | None:
    return g.meta.get("forced_acceptance") or None


def synthetic_suites(g: Group, row: Row) -> str:
    """The suites marked synthetic (variants.jsonl) among those the row's requests measured, by name."""
    marked = set(g.meta.get("synthetic_suites") or [])
    if not marked or g.rq.empty or "suite" not in g.rq:
        return ""
    return " ".join(sorted(marked & {str(s) for s in g.rq["suite"]}))


def engine(g: Group, row: Row) -> str:
    return str(g.meta.get("engine") or DEFAULT_ENGINE)


def sampling(g: Group, row: Row) -> str:
    return sampling_of(g.meta)


def sampling_of(meta: dict[str, Any]) -> str:
    """A variant's sampling arm (run.sampling), else t<its temperature>; "" where its run did not say."""
    arm, temperature = meta.get("sampling"), meta.get("temperature")
    if arm:
        return str(arm)
    return f"t{float(temperature):g}" if isinstance(temperature, int | float) else ""


# --- counts and speed (requests.csv, phases.csv) ----------------------------------------------------------

def requests(g: Group, row: Row) -> int:
    return len(g.ok)


def errors(g: Group, row: Row) -> int:
    return len(g.rq) - len(g.ok)


def output_tokens(g: Group, row: Row) -> int:
    return int(pd.to_numeric(g.ph["output_tokens"]).sum()) if not g.ph.empty else 0


def tok_s(g: Group, row: Row) -> float | None:
    wall = float(pd.to_numeric(g.ph["wall_s"]).sum()) if not g.ph.empty else 0.0
    return row["output_tokens"] / wall if wall > 0 else None


def decode_tok_s(g: Group, row: Row) -> float | None:
    return acceptance.decode_tok_s(g.ok)


def step_ms(g: Group, row: Row) -> float | None:
    decode = row["decode_tok_s"]
    return (1000.0 * (row["accept_len"] or 1.0) / decode) if decode else None


def flush_failed(g: Group, row: Row) -> int:
    return int(g.ph["flush_ok"].eq(False).sum()) if "flush_ok" in g.ph else 0


# --- latency (requests.csv, phases.csv's server means) -----------------------------------------------------

def ttft_p50_ms(g: Group, row: Row) -> float | None:
    return _pct(g.ok["ttft_ms"], 0.5) if not g.ok.empty else None


def ttft_p90_ms(g: Group, row: Row) -> float | None:
    return _pct(g.ok["ttft_ms"], 0.9) if not g.ok.empty else None


def ttft_mean_ms(g: Group, row: Row) -> float | None:
    return _mean(g.ok["ttft_ms"]) if not g.ok.empty else None


def e2e_p50_ms(g: Group, row: Row) -> float | None:
    return _pct(g.ok["e2e_ms"], 0.5) if not g.ok.empty else None


def itl_p50_ms(g: Group, row: Row) -> float | None:
    """Pooled per-token inter-token latencies of every request (records.token_itls_ms), their median."""
    if g.ok.empty:
        return None
    samples: list[float] = []
    for offs, toks in zip(g.ok.get("chunk_offsets_ms", []), g.ok.get("chunk_tokens", []), strict=False):
        if not isinstance(offs, str) or not isinstance(toks, str):
            continue
        times = [float(x) / 1000.0 for x in offs.split()]
        samples.extend(token_itls_ms(times, [int(x) for x in toks.split()]))
    return float(pd.Series(samples).median()) if samples else None


def tokens_per_chunk(g: Group, row: Row) -> float | None:
    return _mean(g.ok["tokens_per_chunk"]) if not g.ok.empty else None


def server_ttft_mean_ms(g: Group, row: Row) -> float | None:
    return _server_mean(g.ph, "server_ttft_ms_mean")


def server_queue_mean_ms(g: Group, row: Row) -> float | None:
    return _server_mean(g.ph, "server_queue_ms_mean")


# --- acceptance (harness.analysis.acceptance) --------------------------------------------------------------

def accept_len_requests(g: Group, row: Row) -> float | None:
    return acceptance.accept_from_records(g.ok)


def accept_len_probe(g: Group, row: Row) -> float | None:
    return acceptance.accept_from_probe(g.probe, g.name, set(g.phase_ids))


def accept_len_server(g: Group, row: Row) -> float | None:
    return acceptance.server_accept(g.ph)


def accept_len_log(g: Group, row: Row) -> float | None:
    return _weighted(g.dec["accept_len"], window_weights(g.dec)) if not g.dec.empty else None


def headline(g: Group, row: Row) -> dict[str, Any]:
    """accept_len and accept_len_source: acceptance.headline over the four sources (speculative rows)."""
    if not row["algorithm"]:
        return {"accept_len": None, "accept_len_source": ""}
    accept, source = acceptance.headline(row["accept_len_requests"], row["accept_len_probe"],
                                         row["accept_len_server"], row["accept_len_log"])
    return {"accept_len": accept, "accept_len_source": source}


def spec_source(g: Group, row: Row) -> str:
    """The response field of the timed requests that carried per-request stats (requests.csv spec_source;
    several joined with +), else "probe" when the untimed replay has them, else ""."""
    if not row["algorithm"]:
        return ""
    if not g.ok.empty and "spec_source" in g.ok:
        verify = pd.to_numeric(g.ok["spec_verify_ct"], errors="coerce")
        fields = {s for s in g.ok.loc[verify > 0, "spec_source"] if isinstance(s, str) and s}
        if fields:
            return "+".join(sorted(fields))
    return "probe" if row["accept_len_probe"] is not None else ""


def accept_rate(g: Group, row: Row) -> float | None:
    accept, ndt = row["accept_len"], row["num_draft_tokens"]
    return (accept - 1.0) / (ndt - 1) if accept is not None and ndt and ndt > 1 else None


def accept_sources_agree(g: Group, row: Row) -> bool | None:
    """Whether the timed (else probe), server and log accept lengths lie within AGREE_TOLERANCE."""
    if not row["algorithm"]:
        return None
    timed = row["accept_len_requests"] if row["accept_len_requests"] is not None else row["accept_len_probe"]
    vals = [v for v in (timed, row["accept_len_server"], row["accept_len_log"]) if v is not None and v == v]
    if len(vals) < 2:
        return None
    return max(vals) / min(vals) - 1.0 <= AGREE_TOLERANCE


def accept_rate_log(g: Group, row: Row) -> float | None:
    return _weighted(g.dec["accept_rate"], g.dec["running_req"]) if not g.dec.empty else None


def cuda_graph_false_windows(g: Group, row: Row) -> int:
    return int(g.dec["cuda_graph"].eq(False).sum()) if not g.dec.empty else 0
