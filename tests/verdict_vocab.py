"""The H200 fixtures' summary.csv files were written before the verdicts gained `equivalent`, `undecided` and
`too-short` (harness.analysis.verdicts): what each stored verdict reads as under today's rules, so the
recomputed summaries can be compared with them. The fixtures themselves stay as the run wrote them."""

import pandas as pd


def as_today(stored: pd.DataFrame, equivalence: float = 0.03) -> list[str]:
    out = []
    for _, r in stored.iterrows():
        v = "" if pd.isna(r.get("verdict")) else str(r["verdict"])
        short = str(r.get("too_short")) == "True" or str(r.get("verdict_reason", "")).startswith("too short")
        if v not in ("within-noise", "faster", "slower"):
            out.append(v)
        elif short:
            out.append("too-short")
        elif r.get("ci_method") == "bootstrap-windows":
            out.append("undecided")
        elif float(r["speedup_ci_low"]) >= 1 - equivalence and float(r["speedup_ci_high"]) <= 1 + equivalence:
            out.append("equivalent")
        else:
            out.append("undecided" if v == "within-noise" else v)
    return out
