"""The live numbers of a run: requests done of total, live tok/s, accept length from the newest windows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from harness.common.terminal import clean
from harness.tui.state import ProgressSnapshot


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


def progress_lines(p: ProgressSnapshot, now: float | None = None,
                   verdicts: dict[str, str] | None = None) -> str:
    # a total the run has not caught up with yet (a phase sized after its first pass) never reads "20 of 16"
    lines = [f"requests {p.done} of {max(p.total, p.done)}" + (f"   errors {p.errors}" if p.errors else "")]
    if now is not None and p.started_at is not None:
        lines[0] += f"   elapsed {_clock(p.elapsed_s(now))}   ETA {_clock(p.eta_at(now))}"
    if p.phase:
        lines.append(f"now: {p.variant}  {p.phase}  ({p.phase_done}/{p.phase_total} in this phase)")
    lines.append("live tok/s (this phase): " + (f"{p.live_tok_s:.1f}" if p.live_tok_s is not None else "-"))
    if p.accept_len:
        lines.append(
            "accept len (newest window): " + "   ".join(f"{k} {v:.2f}" for k, v in p.accept_len.items())
        )
    if verdicts:
        lines.append("verdicts so far (the summary's rule on the records so far):")
        lines += [f"  {variant}: {words}" for variant, words in verdicts.items()]
    return "\n".join(lines)


class ProgressPanel(Vertical):
    def compose(self) -> ComposeResult:
        yield Static(
            "idle: choose suites, variants, concurrency and max tokens, then ctrl+r",
            id="run-status",
            classes="pane-title",
            markup=False,  # phase names come from suites
        )
        yield ProgressBar(total=1, show_eta=False, id="run-bar")  # not indeterminate: that one animates
        yield Static("", id="run-numbers", markup=False)

    def show_status(self, text: str) -> None:
        self.query_one("#run-status", Static).update(clean(text))  # may quote a server's failure

    def show_progress(self, p: ProgressSnapshot | None, now: float | None = None,
                      verdicts: dict[str, str] | None = None) -> None:
        bar = self.query_one("#run-bar", ProgressBar)
        if p is None:
            bar.update(total=1, progress=0)
            self.query_one("#run-numbers", Static).update("")
            return
        bar.update(total=max(p.total, p.done, 1), progress=p.done)
        self.query_one("#run-numbers", Static).update(clean(progress_lines(p, now, verdicts)))
