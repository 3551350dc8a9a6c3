"""A tune's files and answer, written from what its directory holds (harness.studies.tune's report stage):
tune.csv and the report (tune_report), the best config per context bucket (tune_context) and, for
`--concurrency auto`, the crossover and the schedule (crossover_report) appended to the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis import tune_context as tc
from harness.analysis import tune_report as tr

if TYPE_CHECKING:
    from harness.analysis.tune_model import Config
    from harness.analysis.tune_types import TuneRun


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
