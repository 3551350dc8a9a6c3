"""The live numbers of a run: requests done of total, live tok/s, accept length from the newest windows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from harness.tui.state import ProgressSnapshot


def progress_lines(p: ProgressSnapshot) -> str:
    lines = [f"requests {p.done} of {p.total}" + (f"   errors {p.errors}" if p.errors else "")]
    if p.phase:
        lines.append(f"now: {p.variant}  {p.phase}  ({p.phase_done}/{p.phase_total} in this phase)")
    lines.append("live tok/s (this phase): " + (f"{p.live_tok_s:.1f}" if p.live_tok_s is not None else "-"))
    if p.accept_len:
        lines.append(
            "accept len (newest window): " + "   ".join(f"{k} {v:.2f}" for k, v in p.accept_len.items())
        )
    return "\n".join(lines)


class ProgressPanel(Vertical):
    def compose(self) -> ComposeResult:
        yield Static(
            "idle: choose suites, variants, concurrency and max tokens, then ctrl+r",
            id="run-status",
            classes="pane-title",
        )
        yield ProgressBar(total=1, show_eta=False, id="run-bar")  # not indeterminate: that one animates
        yield Static("", id="run-numbers")

    def show_status(self, text: str) -> None:
        self.query_one("#run-status", Static).update(text)

    def show_progress(self, p: ProgressSnapshot | None) -> None:
        bar = self.query_one("#run-bar", ProgressBar)
        if p is None:
            bar.update(total=1, progress=0)
            self.query_one("#run-numbers", Static).update("")
            return
        bar.update(total=max(p.total, 1), progress=p.done)
        self.query_one("#run-numbers", Static).update(progress_lines(p))
