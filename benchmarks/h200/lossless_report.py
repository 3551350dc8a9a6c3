"""The lossless audit of a run, case by case (decide.sh lossless; docs/real-gpu.md takes its figures from it).

  python3 benchmarks/h200/lossless_report.py RUN_DIR [--json OUT.json]

Prints, per (variant, concurrency) against its baseline: the share of same answers, the verdict and its
reason, the divergence rate beside the control's, and every divergent prompt with the token position where
it parts from the baseline, both tokens and the margin in nats (>= for a bound); then how the margins fall
(under 0.1, 0.1-0.5, 0.5-2, over 2 nats) and the control's own divergences' margins, which say what bf16
numerics alone do on this machine. --json writes the same as data (a fixture test reads it back).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis.logprob_paths import margin_at  # noqa: E402
from harness.analysis.lossless import answers, compare, control, read_audit, row_audit  # noqa: E402
from harness.analysis.outputs import first_divergence  # noqa: E402
from harness.analysis.summary import read_tables, read_variants  # noqa: E402

BINS = (0.1, 0.5, 2.0)


def _bin(margin: float) -> str:
    for edge, label in zip(BINS, ("<0.1", "0.1-0.5", "0.5-2"), strict=True):
        if abs(margin) < edge:
            return label
    return ">=2"


def control_cases(base, audit, baseline: str) -> list[dict]:
    """The control's own divergences from the timed answers, with their margins (numerics alone)."""
    out = []
    for s, p, text in zip(base["suite"], base["prompt_id"], base["answer"], strict=True):
        free = audit.free.get((baseline, s, p))
        if free is None or free == text:
            continue
        d = first_divergence(text, free)
        m = margin_at(audit.paths.get((baseline, s, p), []), text, free, d) if d is not None else None
        out.append({"prompt": f"{s}/{p}", "char": d, "margin": None if m is None else round(abs(m.margin), 4),
                    "token": None if m is None else m.token})
    return out


def report(run_dir: Path) -> dict:
    audit = read_audit(run_dir)
    if audit is None:
        raise SystemExit(f"{run_dir}: no audit.jsonl (was run.lossless_audit off, or the run not greedy?)")
    requests, outputs = read_tables(run_dir, ("requests.csv", "outputs.csv"))
    variants = read_variants(run_dir)
    rows = []
    for baseline in audit.passes:
        for conc in sorted(set(requests[requests["variant"] == baseline]["concurrency"])):
            base = answers(requests, outputs, baseline, int(conc))
            ctl = control(base, audit, baseline)
            for name, meta in variants.items():
                if meta.get("baseline") or name not in set(requests["variant"]):
                    continue
                cases, broken, n = compare(base, answers(requests, outputs, name, int(conc)), audit, baseline)
                got = row_audit(requests, outputs, audit, baseline, name, int(conc))
                rows.append({
                    "variant": name, "baseline": baseline, "concurrency": int(conc), "compared": n,
                    "same": n - len(cases), "verdict": got.get("lossless_verdict"),
                    "detail": got.get("lossless_detail"), "divergence_rate": got.get("divergence_rate"),
                    "control": None if ctl is None else {"differ": ctl[0], "compared": ctl[1]},
                    "control_cases": control_cases(base, audit, baseline),
                    "broken_expectations": broken,
                    "cases": [{"prompt": f"{c.suite}/{c.prompt_id}", "char": c.char,
                               "token": None if c.margin is None else c.margin.token,
                               "base_token": None if c.margin is None else c.margin.base_token,
                               "spec_token": None if c.margin is None else c.margin.spec_token,
                               "margin": None if c.margin is None else round(c.margin.margin, 4),
                               "bound": None if c.margin is None else c.margin.bound} for c in cases]})
    return {"run": str(run_dir), "audit": audit.passes, "rows": rows}


def show(data: dict) -> None:
    for r in data["rows"]:
        n = r["compared"]
        print(f"{r['variant']} c{r['concurrency']} vs {r['baseline']}: {r['same']}/{n} same "
              f"({100 * r['same'] / n:.0f} %), verdict {r['verdict']}" if n
              else f"{r['variant']}: nothing compared")
        print(f"  {r['detail']}")
        margins = [c["margin"] for c in r["cases"] if c["margin"] is not None]
        bins = {label: sum(_bin(m) == label for m in margins) for label in ("<0.1", "0.1-0.5", "0.5-2",
                                                                            ">=2")}
        print(f"  margins (nats): {bins}; not reached: {sum(c['margin'] is None for c in r['cases'])}")
        ctl = [c["margin"] for c in r["control_cases"] if c["margin"] is not None]
        print(f"  control: {r['control']}; its margins: max {max(ctl):.3f}" if ctl
              else f"  control: {r['control']}")
        for c in sorted(r["cases"], key=lambda c: -(c["margin"] or 0)):
            sign = ">=" if c["bound"] else ""
            print(f"    {c['prompt']} char {c['char']} token {c['token']}: {c['base_token']!r} vs "
                  f"{c['spec_token']!r} {sign}{c['margin']}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    data = report(Path(argv[0]))
    show(data)
    if "--json" in argv:
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
