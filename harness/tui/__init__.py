"""The Textual front end (`draftbench` / `draftbench tui`). Only this package imports textual."""
