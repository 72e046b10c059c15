"""Judges: a finished episode in, a verdict (score and error categories) out."""

from ctu.components.judges.base import Judge, JudgeInput, Verdict

__all__ = ["Judge", "JudgeInput", "Verdict"]
