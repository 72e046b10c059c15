"""Judges: a finished episode in, a verdict (score and error categories) out."""

from ctu.components.judges import mast as mast  # registers "mast"
from ctu.components.judges import taxonomy as taxonomy  # registers "llm_taxonomy" and "rule_taxonomy"
from ctu.components.judges.base import Judge, JudgeInput, Verdict

__all__ = ["Judge", "JudgeInput", "Verdict"]
