"""Widgets the section screens are built from."""
