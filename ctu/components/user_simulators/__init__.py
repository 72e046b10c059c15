"""User simulators: the customer side of a tau-bench episode."""

from ctu.components.user_simulators import builtin as builtin  # registers "llm" and "scripted"
