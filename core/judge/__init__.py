"""Judging: one output compared element by element, the re-judge profile, where the errors are."""
