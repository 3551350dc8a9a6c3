"""Modal dialogs: the help screen (`?`) and the export path prompt."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from harness.common.terminal import clean

HELP_PER_LINE = 3
HELP_KEY_W, HELP_DESC_W = 7, 20


def key_help(sections: list[tuple[str, list[Binding]]]) -> str:
    """The bindings as text, read from the classes' BINDINGS so the help cannot drift from the keys."""
    out: list[str] = []
    for title, bindings in sections:
        out.append(f"[b]{title}[/b]")
        cells = [
            f"{escape(b.key_display or b.key):<{HELP_KEY_W}}{b.description:<{HELP_DESC_W}}" for b in bindings
        ]
        for i in range(0, len(cells), HELP_PER_LINE):
            out.append("  " + " ".join(cells[i : i + HELP_PER_LINE]).rstrip())
        out.append("")
    out.append("ctrl+p opens the command palette: every action is there too. The mouse works everywhere.")
    return "\n".join(out)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def action_close(self) -> None:
        self.dismiss(None)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog"):
            yield Static("draftbench keys (esc closes)", classes="pane-title")
            with VerticalScroll():
                yield Static(self.text, id="help-text")


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
