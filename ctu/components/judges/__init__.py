"""Judges: a finished trajectory in, a verdict (score and error categories) out."""

from ctu.components.judges import builtin as builtin  # registers the built-in judges
