"""Reward components, applied in the spec's order; each sees the reward so far and the training phase."""

from ctu.components.rewards import outcome as outcome  # registers "tau_outcome"
from ctu.components.rewards import shaping as shaping  # registers "partial_credit", "format_penalty", "zero_on_non_stop"
from ctu.components.rewards import tau2_checks as tau2_checks  # registers "tau2_checks"
from ctu.components.rewards import taxonomy_feedback as taxonomy_feedback  # registers "taxonomy_feedback"
