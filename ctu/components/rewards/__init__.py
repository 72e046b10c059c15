"""Reward components, applied in the spec's order; each sees the reward so far and the training phase."""

from ctu.components.rewards import builtin as builtin  # registers the built-in rewards
