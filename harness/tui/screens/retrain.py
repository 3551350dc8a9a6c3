"""Retrain: drafters and the runs that served them; SpecForge training jobs with live progress and their
checkpoints (evaluate one: register, preflight, benchmark); regenerating training data with the target.
Everything goes through harness.retrain (the core), driven by the App."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from harness.analysis.runs import DrafterInfo
from harness.tui.dialogs import FormDialog
from harness.tui.retrain_control import train_fields
from harness.tui.screens.section import SUB_TAB_KEYS, SectionScreen
from harness.tui.widgets.table import Table

if TYPE_CHECKING:
    from harness.retrain.checkpoints import Checkpoint
    from harness.retrain.progress import TrainProgress
    from harness.retrain.regen_rows import RegenProgress

REGEN_FIELDS = [
    ("input", "conversations to regenerate (JSONL, on this machine)", ""),
    ("output", "output JSONL (resumable: finished rows are skipped)", ""),
    ("concurrency", "concurrent requests", "64"),
    ("max_tokens", "max tokens per answer", "2048"),
]


def _best(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{max(vals):.2f}" if vals else "-"


def _num(v: float | None, spec: str = "{:.3f}") -> str:
    return "-" if v is None else spec.format(v)


def progress_text(p: TrainProgress | None) -> str:
    if p is None:
        return "no job followed: select one and press w, or start one with t"
    epoch = f"epoch {p.epoch + 1}/{p.num_epochs or '?'}" if p.epoch is not None else "epoch -"
    step = (
        f"step {p.global_step}" + (f"/{p.total_steps}" if p.total_steps else "")
        if p.global_step
        else "step -"
    )
    eta = f"ETA {p.eta_s:.0f} s" if p.eta_s is not None else ""
    head = f"{p.job_id}  [{p.state}]  {epoch}  {step}  {eta}"
    nums = (
        f"loss {_num(p.loss)}  acc {_num(p.acc)}  acceptance rate {_num(p.acceptance_rate)}  "
        f"checkpoints saved {len(p.checkpoints)}"
    )
    return head + "\n" + nums + ("\n" + p.bar if p.bar else "")


class RetrainScreen(SectionScreen):
    SECTION = "retrain"
    BINDINGS = [
        Binding("u", "refresh", "Refresh", show=False),
        Binding("t", "train", "Train a drafter"),
        Binding("w", "follow", "Follow job"),
        Binding("k", "job('cancel')", "Cancel job"),
        Binding("y", "job('resume')", "Resume job", show=False),
        Binding("v", "evaluate", "Evaluate checkpoint"),
        Binding("g", "regen", "Regenerate data"),
        Binding("G", "stop_regen", "Stop regeneration", show=False),
        Binding("L", "loop", "Retrain loop", show=False),
        Binding("D", "drift", "Check drift", show=False),
        *SUB_TAB_KEYS,
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        with TabbedContent(id="retrain-tabs"):
            with TabPane("Drafters", id="tab-drafters"):
                with Vertical(id="retrain-main"):
                    yield Table(id="drafters-table", cursor_type="row", zebra_stripes=True)
                    yield Static(
                        "Runs that served it", id="drafter-runs-title", classes="pane-title", markup=False
                    )
                    yield Table(id="drafter-runs", cursor_type="row", zebra_stripes=True)
            with TabPane("Training", id="tab-training"):
                yield Table(id="jobs-table", cursor_type="row", zebra_stripes=True)
                yield Static(progress_text(None), id="job-progress", markup=False)
                yield Static(
                    "Checkpoints of the followed job (v evaluates the selected one)", classes="pane-title"
                )
                yield Table(id="checkpoints-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Data", id="tab-data"):
                yield Static(
                    "g regenerates training data with the target model itself (the baseline server "
                    "of the Servers section when it is up, else one started for it); G stops.",
                    classes="pane-title",
                )
                yield Static("no regeneration yet", id="regen-progress", markup=False)
                yield Static(
                    "L runs the whole loop for a variant: its weak spots in the newest run, regeneration, "
                    "training, the A/B against the current drafter, promotion only if it "
                    "passes; D checks its drift.",
                    classes="pane-title",
                )
                yield Static("", id="loop-status", markup=False)
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        columns = {
            "#drafters-table": [
                ("name", "drafter"),
                ("algorithm", "algo"),
                ("trained_for", "trained for"),
                ("runs", "runs"),
                ("accept", "best accept len"),
                ("speedup", "best speedup"),
            ],
            "#drafter-runs": [
                ("run", "run"),
                ("variant", "variant"),
                ("conc", "conc"),
                ("accept", "accept len"),
                ("speedup", "speedup"),
            ],
            "#jobs-table": [
                ("job", "job"),
                ("state", "state"),
                ("era", "era"),
                ("output", "checkpoints in"),
                ("created", "created"),
            ],
            "#checkpoints-table": [
                ("name", "checkpoint"),
                ("epoch", "epoch"),
                ("step", "step"),
                ("servable", "servable"),
                ("aliases", "aliases"),
            ],
        }
        for selector, cols in columns.items():
            table = self.query_one(selector, DataTable)
            for key, label in cols:
                table.add_column(label, key=key)
        self.watch(self.app, "drafters", self._show_drafters)
        self.watch(self.app, "jobs", self._show_jobs)
        self.watch(self.app, "job_progress", self._show_progress)
        self.watch(self.app, "checkpoints", self._show_checkpoints)
        self.watch(self.app, "regen_progress", self._show_regen)
        self.watch(self.app, "retrain_note", self._show_loop)
        self.query_one("#drafters-table").focus()

    # ---- attributes down ----------------------------------------------------------------------------------
    def _show_drafters(self, drafters: tuple[DrafterInfo, ...]) -> None:
        table = self.query_one("#drafters-table", DataTable)
        with self.app.batch_update():
            for key in [k for k in table.rows if k.value not in {d.name for d in drafters}]:
                table.remove_row(key)
            for d in drafters:
                cells = {
                    "name": d.name,
                    "algorithm": d.algorithm,
                    "trained_for": d.trained_for or "-",
                    "runs": str(len({r[0] for r in d.results})),
                    "accept": _best([r[3] for r in d.results]),
                    "speedup": _best([r[4] for r in d.results]),
                }
                if d.name in table.rows:
                    for key, value in cells.items():
                        table.update_cell(d.name, key, value, update_width=True)
                else:
                    table.add_row(*cells.values(), key=d.name)
        self._show_drafter_runs()

    def _show_drafter_runs(self) -> None:
        name = _selected(self.query_one("#drafters-table", DataTable))
        runs = self.query_one("#drafter-runs", DataTable)
        runs.clear()
        if name is None:
            return
        self.query_one("#drafter-runs-title", Static).update(f"Runs that served {name}")
        drafter = next((d for d in self.app.drafters if d.name == name), None)
        own = [(r, False) for r in (drafter.results if drafter else ())]
        forced = [(r, True) for r in (drafter.forced if drafter else ())]  # listed, labelled, never "best"
        for i, ((run, variant, conc, accept, speedup), is_forced) in enumerate(own + forced):
            runs.add_row(
                run, f"{variant} (FORCED)" if is_forced else variant, str(conc), _num(accept, "{:.2f}"),
                _num(speedup, "{:.2f}x"), key=f"r{i}"
            )

    def _show_jobs(self, jobs: tuple[Any, ...]) -> None:
        table = self.query_one("#jobs-table", DataTable)
        with self.app.batch_update():
            for key in [k for k in table.rows if k.value not in {j.job_id for j in jobs}]:
                table.remove_row(key)
            for j in jobs:
                cells = {
                    "job": j.job_id,
                    "state": j.state + (f" ({j.exit_code})" if j.exit_code else ""),
                    "era": j.era,
                    "output": j.output_dir,
                    "created": j.created_at,
                }
                if j.job_id in table.rows:
                    for key, value in cells.items():
                        table.update_cell(j.job_id, key, value, update_width=True)
                else:
                    table.add_row(*cells.values(), key=j.job_id)

    def _show_progress(self, p: TrainProgress | None) -> None:
        self.query_one("#job-progress", Static).update(progress_text(p))

    def _show_checkpoints(self, checkpoints: tuple[Any, ...]) -> None:
        table = self.query_one("#checkpoints-table", DataTable)
        with self.app.batch_update():
            for key in [k for k in table.rows if k.value not in {c.path for c in checkpoints}]:
                table.remove_row(key)
            for c in checkpoints:
                if c.path not in table.rows:
                    table.add_row(
                        c.name,
                        _num(c.epoch, "{}"),
                        _num(c.step, "{}"),
                        "yes" if c.servable else "needs export",
                        ", ".join(c.aliases),
                        key=c.path,
                    )

    def _show_regen(self, p: RegenProgress | None) -> None:
        if p is not None:
            self.query_one("#regen-progress", Static).update(
                f"[{p.state}] {p.note()}\n{p.detail}\n-> {p.output_path}"
            )

    def _show_loop(self, text: str) -> None:
        self.query_one("#loop-status", Static).update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "drafters-table":
            self._show_drafter_runs()

    # ---- messages up (the App's retrain half does the work) -----------------------------------------------
    def _tab(self, tab: str) -> None:
        self.query_one("#retrain-tabs", TabbedContent).active = tab

    def action_refresh(self) -> None:
        self.app.action_refresh_drafters()
        self.app.action_refresh_jobs()

    def action_train(self) -> None:
        if self.app.plan is None:
            return
        self._tab("tab-training")

        def done(values: dict[str, str] | None) -> None:
            if values:
                self.app.retrain_control.train(values)

        self.app.push_screen(
            FormDialog(
                "Train an EAGLE-3 drafter with SpecForge on the target",
                train_fields(self.app.plan),
                ok="Start training",
            ),
            done,
        )

    def _job(self) -> str | None:
        job = _selected(self.query_one("#jobs-table", DataTable))
        if job is None:
            self.notify("no training job selected (Training tab)", severity="warning")
        return job

    def action_follow(self) -> None:
        job_id = self._job()
        job = next((j for j in self.app.jobs if j.job_id == job_id), None)
        if job is not None:
            self._tab("tab-training")
            self.app.retrain_control.follow(job)

    def action_job(self, action: str) -> None:
        job_id = self._job()
        if not job_id:
            return
        if action != "cancel":
            self.app.retrain_control.job_action(action, job_id)
            return
        self.app.session_control.confirm(
            f"Cancel training job {job_id}? Its checkpoints so far stay; y (resume) continues from the last.",
            [("yes", "Cancel the job")],
            lambda _: self.app.retrain_control.job_action(action, job_id),
        )

    def action_evaluate(self) -> None:
        path = _selected(self.query_one("#checkpoints-table", DataTable))
        ckpt = next((c for c in self.app.checkpoints if c.path == path), None)
        if ckpt is None:
            self.notify("no checkpoint selected: follow a job (w) and pick one", severity="warning")
            return

        def done(values: dict[str, str] | None) -> None:
            if values and values.get("name"):
                self.app.retrain_control.evaluate(ckpt, values["name"])

        default = default_drafter_name(self.app.plan.name, ckpt)
        self.app.push_screen(
            FormDialog(
                f"Evaluate {ckpt.name}: register it as a drafter, preflight, benchmark "
                "it against the baseline",
                [("name", "drafter name", default)],
                ok="Evaluate",
            ),
            done,
        )

    def action_regen(self) -> None:
        if self.app.plan is None:
            return
        self._tab("tab-data")

        def done(values: dict[str, str] | None) -> None:
            if values:
                self.app.retrain_control.regenerate(values)

        self.app.push_screen(
            FormDialog("Regenerate training data with the target model", REGEN_FIELDS, ok="Regenerate"), done
        )

    def action_stop_regen(self) -> None:
        self.app.retrain_control.stop_regen()

    def action_loop(self) -> None:
        if self.app.plan is None:
            return
        self._tab("tab-data")
        from harness.tui.loop_control import loop_fields

        def done(values: dict[str, str] | None) -> None:
            if values:
                self.app.loop_control.retrain(values)

        self.app.push_screen(FormDialog("Retrain: weak spots -> regenerate -> train -> A/B -> promote only "
                                        "if it passes", loop_fields(self.app.plan), ok="Start the loop"),
                             done)

    def action_drift(self) -> None:
        if self.app.plan is None:
            return
        from harness.tui.loop_control import speculative_variants

        self._tab("tab-data")
        names = speculative_variants(self.app.plan)

        def done(values: dict[str, str] | None) -> None:
            if values:
                self.app.loop_control.check_drift(values.get("variant", ""))

        self.app.push_screen(FormDialog("Check drift: acceptance per category "
                                        "against the promotion's profile",
                                        [("variant", "variant", names[0] if names else "")], ok="Check"),
                             done)


def default_drafter_name(plan_name: str, ckpt: Checkpoint) -> str:
    """The core's name for a checkpoint's drafter; a slug of it when the plan's name does not fit one."""
    from harness.common.errors import InputError
    from harness.retrain.checkpoints import drafter_name

    try:
        return drafter_name(plan_name, ckpt)
    except InputError:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{plan_name}-{ckpt.label}").strip("-.") or ckpt.label


def _selected(table: DataTable) -> str | None:
    if not table.row_count:
        return None
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
