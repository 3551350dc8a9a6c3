"""The App's closed-loop half: the Retrain section's loop (L: `draftbench retrain`) and drift check (D:
`draftbench watch`), and the Results section's weak spots of an opened run (W). The loop and the check run in
the run's own child process like any run (they end in an evaluation or check run); their steps arrive as
RetrainNote (the Data tab shows the last one whole: the weak-spot table, the gate's rows), their progress as
the run's status line, a drift alarm as an alarm. The evaluation's RunDone is held back until the loop ends,
so the Run section says "done" once the gate has spoken, not when the benchmark part ended."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import events as ev
from harness.common.errors import InputError
from harness.tui import messages as msg
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed, translate
from harness.tui.half import Half, handles, work
from harness.tui.runproc import RunProcess

if TYPE_CHECKING:
    from textual.message import Message

    from harness.inputs.config import Plan
    from harness.retrain.loop_state import RetrainSettings
    from harness.targets.base import Target

LOOP = "harness.retrain.loop:retrain_loop"
WATCH = "harness.retrain.watch:watch"


def speculative_variants(plan: Plan) -> list[str]:
    return [v.name for v in plan.variants if v.drafter is not None and not v.is_existing]


def loop_fields(plan: Plan) -> list[tuple[str, str, str]]:
    names = speculative_variants(plan)
    return [
        ("variant", f"variant whose drafter to retrain ({', '.join(names) or 'none has a drafter'})",
         names[0] if names else ""),
        ("by", "weak spots by category, prompt or turn", "category"),
        ("lowest", "how many of the lowest spots are weak", "1"),
        ("traffic", "a traffic log added to the data (JSONL on this machine; empty: none)", ""),
        ("epochs", "training epochs (fine-tuning the current drafter)", "2"),
        ("rule", "gate: faster, or faster-or-equivalent-higher-accept", "faster"),
    ]


def loop_settings(values: dict[str, str]) -> RetrainSettings:
    """The dialog's text -> RetrainSettings; pydantic's errors name the field."""
    from harness.retrain.loop_state import RetrainSettings

    data: dict[str, Any] = {"level": values.get("by") or "category", "rule": values.get("rule") or "faster"}
    for key, name in (("lowest", "lowest"), ("epochs", "epochs")):
        text = (values.get(key) or "").strip()
        if text:
            if not text.isdigit():
                raise InputError(None, None, key, f"a whole number, got {text!r}")
            data[name] = int(text)
    if (values.get("traffic") or "").strip():
        data["traffic"] = [str(Path(values["traffic"].strip()).expanduser().resolve())]
    return RetrainSettings.model_validate(data)


class LoopFeed(EventFeed):
    """Core events -> messages, the loop's own steps included; the evaluation's RunDone held back."""

    held: ev.RunDone | None = None

    def push(self, event: object) -> None:
        kind = type(event).__name__
        if kind == "LoopStep":
            self.flush()
            if event.state == "progress":
                self.post(msg.RunNote("", event.text))
            else:
                self.post(msg.RetrainNote(event.retrain_note, ok=event.state not in ("refused",)))
            return
        if kind == "DriftCheck":
            self.flush()
            self.post(msg.RetrainNote("\n".join(event.lines()), ok=not event.alarm))
            return
        if isinstance(event, ev.RunDone):
            self.held = event
            return
        super().push(event)


class LoopProcess(RunProcess):
    """A loop or a drift check in runchild; ends with the held RunFinished (if a run ended) and LoopEnded."""

    def __init__(self, call: str, args: tuple, kwargs: dict[str, Any], *, post: Callable[[Message], Any],
                 target_factory: Callable[[], Target] | None = None,
                 flush_interval: float = FLUSH_INTERVAL_S) -> None:
        super().__init__(call, args, kwargs, post=post, target_factory=target_factory,
                         flush_interval=flush_interval)
        self.feed = LoopFeed(self.post, source="run")

    def ended(self, status: str, detail: str) -> None:
        held = self.feed.held
        if status == "done" and held is not None:
            self.post(translate(held, "run"))  # RunFinished: the Results section reads the run
        elif status != "done":
            super().ended(status, detail)
        self.post(msg.LoopEnded(status, detail))


class LoopControl(Half):
    """The retrain loop, the drift check and the weak spots of an opened run, over the App's state."""

    def retrain(self, values: dict[str, str]) -> None:
        app = self.app
        if app.plan is None:
            app.notify("the plan is not loaded yet", severity="warning")
            return
        try:
            settings = loop_settings(values)
            variant = values.get("variant", "")
            app.plan.variant(variant)
        except (InputError, ValueError, KeyError) as exc:  # pydantic's ValidationError is a ValueError
            app.notify(str(exc), title="Cannot start the loop", severity="error", timeout=15)
            return
        self._start_loop(LOOP, (app.plan, variant), {"settings": settings})

    def check_drift(self, variant: str) -> None:
        app = self.app
        if app.plan is None or variant not in speculative_variants(app.plan):
            app.notify("no speculative variant with a drafter to check", severity="warning")
            return
        self._start_loop(WATCH, (app.plan, variant), {})

    def _start_loop(self, call: str, args: tuple, kwargs: dict[str, Any]) -> None:
        app = self.app
        app.run_control.start_run(LoopProcess(call, args, {**kwargs, "results_dir": str(app.results_dir)},
                                              post=app.post_message, target_factory=app.target_factory,
                                              flush_interval=app.flush_interval))

    @handles(msg.LoopEnded)
    def _loop_ended(self, m: msg.LoopEnded) -> None:
        app = self.app
        if m.status == "done" and app.run_state in ("preparing", "running"):  # ended without a run of its own
            app.run_control.set_state("done", "retrain: " + (app.retrain_note.splitlines() or ["ended"])[0])
        app.action_refresh_drafters()
        if app.plan_path and app.retrain_note.startswith("promoted:"):  # not the gate's "not promoted: ..."
            app._load_plan()  # the variant's drafters/ file now names the new checkpoint

    # ---- Results: the weak spots of the opened run ---------------------------------------------------------
    def weak_spots(self, run_dir: str, variant: str) -> None:
        self._weak_spots(run_dir, variant)

    @work(thread=True, group="results")
    def _weak_spots(self, run_dir: str, variant: str) -> None:
        from harness.retrain import weak_spots as ws
        from harness.retrain.dataset import REGEN_INPUT, build_input

        rq = ws.variant_requests(run_dir, variant)
        found, ref = ws.spots(rq, "category"), ws.overall(rq)
        chosen = ws.pick(found, lowest=1)
        out = Path(self.app.results_dir) / "retrain" / f"weak-{Path(run_dir).name}-{variant}"
        m = build_input(run_dir, variant, chosen, "category", out)
        lines = [line.replace("\t", "  ") for line in ws.spot_lines(found, chosen, ref)]
        self.app.post_message(msg.RetrainNote("\n".join([
            f"weak spots of {variant}: {len(m.rows)} rows -> {out / REGEN_INPUT} ({len(m.held_out)} prompts "
            "held out); g in Retrain regenerates them, L runs the whole loop", *lines, *m.notes])))
