"""A tune's files and answer, written from what its directory holds (harness.studies.tune's report stage):
tune.csv and the report (tune_report), the best config per context bucket (tune_context) and, for
`--concurrency auto`, the crossover and the schedule (crossover_report) appended to the report; and
`tune --write-plan`'s variant appended to the plan file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from harness.analysis import tune_context as tc
from harness.analysis import tune_report as tr

if TYPE_CHECKING:
    from harness.analysis.tune_model import Config
    from harness.analysis.tune_types import TuneRun
    from harness.inputs.config import Variant


def write_all(t: TuneRun, measured: dict[Config, dict[int, float]], base: dict[int, float],
              auto: bool) -> tuple[Path, bool]:
    """Every output of the tune; (tune.csv's path, whether the answer says something at some level)."""
    rows = tr.tune_rows(t, measured, base)
    tc.write_context_rows(t, measured, base)  # tune_by_context.csv
    crossover = None
    if auto:  # where speculation stops paying, the schedule
        from harness.analysis import crossover_report as cr
        from harness.analysis.crossover_text import lines as crossover_lines

        crossover = cr.build(t)
        rows = cr.annotate(rows, crossover)
    out = tr.write_outputs(t, rows)
    if crossover is not None:
        cr.write(t, crossover)
        with open(t.dir / "tune_report.txt", "a", encoding="utf-8") as fh:
            fh.write("\n".join(crossover_lines(t, crossover)) + "\n")
    answered = any(line.startswith("c") and "nothing to predict" not in line
                   for line in tr.answer(rows, t.hists, t.wide.num_steps))
    return out, answered


def write_plan_variant(plan_path: Path, rows: pd.DataFrame, tuned: Variant) -> str | None:
    """--write-plan: append the overall winner as a variant to the plan file (text append keeps comments)."""
    best = tr.best_per_concurrency(rows)
    if not best:
        return None
    b = max(best.values(), key=lambda r: float(r["speedup_pred"]))
    name = f"{tuned.name}-tuned-s{b['num_steps']}k{b['eagle_topk']}d{b['num_draft_tokens']}"
    text = plan_path.read_text(encoding="utf-8")
    if f"name: {name}\n" in text:
        return name
    if "\nvariants:\n" not in text:
        return None
    head, tail = text.split("\nvariants:\n", 1)
    # the variants block ends at the next top-level key
    lines = tail.split("\n")
    # the new item is indented like the file's own items ("  - name:" or PyYAML's "- name:")
    dash = next((ln[: len(ln) - len(ln.lstrip())] for ln in lines if ln.lstrip().startswith("- ")), "  ")
    pad = dash + "  "
    block = (f"# added by draftbench tune: predicted {float(b['speedup_pred']):.2f}x\n"
             f"{dash}- name: {name}\n{pad}drafter: {tuned.drafter.name}\n"
             f"{pad}algorithm: {tuned.spec_algorithm}\n{pad}num_steps: {b['num_steps']}\n"
             f"{pad}eagle_topk: {b['eagle_topk']}\n{pad}num_draft_tokens: {b['num_draft_tokens']}\n"
             f"{pad}cuda_graph: {str(bool(b['cuda_graph'])).lower()}\n")
    end = next((i for i, ln in enumerate(lines) if ln and not ln.startswith((" ", "-", "#"))), len(lines))
    rest = "\n".join(lines[end:]) if end < len(lines) else ""
    new = "\n".join(lines[:end]).rstrip("\n") + "\n" + block + rest
    plan_path.write_text(head + "\nvariants:\n" + new, encoding="utf-8")
    return name
