"""Modal dialogs: the help screen (`?`), the export path prompt, forms, confirmations and the preflight's
findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from harness.common.terminal import clean

if TYPE_CHECKING:
    from textual.widgets import DataTable

HELP_DESC_W = 20
# keys Textual gives every section, said in `?` help and the README with the sections' own
GENERAL_KEYS = [
    ("ctrl+p", "Command palette"),
    ("tab", "Next table or field"),
    ("left/right", "Table sideways"),
    ("ctrl+q", "Quit, as q"),
]
KeySections = list[tuple[str, list[tuple[str, str]]]]


def key_list(bindings: list[Binding]) -> list[tuple[str, str]]:
    """(key as shown, description) of each binding, `,`-joined keys as one."""
    return [(b.key_display or b.key, b.description) for b in bindings]


def key_help(sections: KeySections, width: int = 94) -> Text:
    """The keys as text, read from the classes' BINDINGS so the help cannot drift from them; as many keys to
    a line as `width` cells hold. Plain text (a key like `[` is no markup), the section titles bold."""
    key_w = max((len(k) for _, keys in sections for k, _ in keys), default=6) + 1
    per_line = max(1, (width - 2) // (key_w + HELP_DESC_W + 1))
    out = Text()
    for title, keys in sections:
        out.append(title + "\n", style="bold")
        cells = [f"{k:<{key_w}}{d:<{HELP_DESC_W}}" for k, d in keys]
        for i in range(0, len(cells), per_line):
            out.append("  " + " ".join(cells[i : i + per_line]).rstrip() + "\n")
        out.append("\n")
    out.append("Every action is in the command palette (ctrl+p). The mouse works too.")
    return out


def readme_keys(sections: KeySections) -> str:
    """The README's table of keys, from the same sections as `?` help (tests/test_tui_layout.py keeps the
    README equal to it)."""
    rows = ["| where | keys |", "|---|---|"]
    for title, keys in sections:
        rows.append(f"| {title} | " + ", ".join(f"`{k}` {d}" for k, d in keys) + " |")
    return "\n".join(rows)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, sections: KeySections) -> None:
        super().__init__()
        self.sections = sections
        self.text = key_help(sections)

    def action_close(self) -> None:
        self.dismiss(None)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog"):
            yield Static("draftbench keys (esc closes)", classes="pane-title")
            with VerticalScroll():
                yield Static(self.text, id="help-text")

    def on_resize(self) -> None:
        """As many keys to a line as the dialog holds: never a description wrapped onto the next line."""
        width = self.query_one("#help-text").content_region.width \
            or self.query_one("#help-box").size.width - 6
        text = key_help(self.sections, width)
        if text.plain != self.text.plain:
            self.text = text
            self.query_one("#help-text", Static).update(text)


class ExportDialog(ModalScreen[str | None]):
    """Asks for the CSV path; dismisses with it, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str, what: str = "summary") -> None:
        super().__init__()
        self.default = default
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box", classes="dialog"):
            yield Label(f"Export the {self.what} table as CSV to:")
            yield Input(self.default, id="export-path")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Export", id="export-ok", variant="primary")
                yield Button("Cancel", id="export-cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "export-ok":
            self.dismiss(self.query_one(Input).value.strip() or None)
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class FormDialog(ModalScreen[dict[str, str] | None]):
    """A few labelled text fields; dismisses with {key: value} on submit, None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, fields: list[tuple[str, str, str]], ok: str = "OK") -> None:
        super().__init__()
        self.title_text = title
        self.fields = fields  # (key, label, default)
        self.ok = ok

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog form-dialog"):
            yield Static(self.title_text, classes="pane-title", markup=False)
            with VerticalScroll():
                for key, label, default in self.fields:
                    yield Label(label, classes="form-label")
                    yield Input(default, id=f"field-{key}", compact=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.ok, id="form-ok", variant="primary")
                yield Button("Cancel", id="form-cancel")

    def on_mount(self) -> None:
        self.query(Input).first().focus()

    def values(self) -> dict[str, str]:
        return {key: self.query_one(f"#field-{key}", Input).value.strip() for key, _, _ in self.fields}

    def on_input_submitted(self, event: Input.Submitted) -> None:
        inputs = list(self.query(Input))
        i = inputs.index(event.input)
        if i + 1 < len(inputs):
            inputs[i + 1].focus()
        else:
            self.dismiss(self.values())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self.values() if event.button.id == "form-ok" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[str | None]):
    """A question with a few answers (key, label); dismisses with the key, or None on escape/Cancel.
    Destructive single keys (quit during a run, cancel, stop all) go through here."""

    BINDINGS = [Binding("escape,n", "cancel", "Cancel"), Binding("y", "first", "The first answer")]

    def __init__(self, question: str, answers: list[tuple[str, str]]) -> None:
        super().__init__()
        self.question = question
        self.answers = answers

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog confirm-dialog"):
            yield Static(self.question, id="confirm-text", markup=False)
            with Horizontal(classes="dialog-buttons"):
                for i, (key, label) in enumerate(self.answers):
                    yield Button(label, id=f"confirm-{key}", variant="error" if i == 0 else "default")
                yield Button("Cancel", id="confirm-cancel")

    def on_mount(self) -> None:
        self.query(Button).first().focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        key = (event.button.id or "").removeprefix("confirm-")
        self.dismiss(None if key == "cancel" else key)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_first(self) -> None:
        self.dismiss(self.answers[0][0])


class ReportScreen(ModalScreen[None]):
    """A text report (the palette's preflight findings), scrollable; esc closes."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = title, clean(text)  # findings and reports quote servers and suites

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog report-dialog"):
            yield Static(self.title_text, classes="pane-title", markup=False)
            with VerticalScroll():
                yield Static(self.text, id="report-text", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)


class FindingsScreen(ModalScreen[None]):
    """The preflight's findings (the palette's `draftbench check`) as a table, one row each; the highlighted
    row's why and fix below it, wrapped to the dialog. esc closes."""

    BINDINGS = [Binding("escape,q", "close", "Close")]
    COLUMNS = (("severity", "severity"), ("variant", "variant"), ("what", "what"), ("code", "code"))

    def __init__(self, title: str, findings: tuple) -> None:
        super().__init__()
        self.title_text, self.findings = title, tuple(findings)

    def compose(self) -> ComposeResult:
        from harness.tui.widgets.table import Table

        with Vertical(classes="dialog findings-dialog"):
            yield Static(self.title_text, classes="pane-title", markup=False)
            yield Table(id="findings-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="finding-detail-pane"):
                yield Static("no findings" if not self.findings else "", id="finding-detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one("#findings-table")
        table.fixed_columns = 1
        for key, label in self.COLUMNS:
            table.add_column(label, key=key)
        for i, f in enumerate(self.findings):
            table.add_row(f.severity, f.variant or "(plan)", f.what, f.code, key=str(i))
        table.focus()
        self._detail(0)

    def _detail(self, i: int) -> None:
        if not 0 <= i < len(self.findings):
            return
        f = self.findings[i]
        lines = [f"{f.severity} {f.variant or '(plan)'}: {f.what}"]
        lines += [f"why: {f.why}"] if f.why else []
        lines += [f"fix: {f.fix}"] if f.fix else []
        self.query_one("#finding-detail", Static).update(clean("\n".join(lines)))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._detail(int(event.row_key.value))

    def action_close(self) -> None:
        self.dismiss(None)
