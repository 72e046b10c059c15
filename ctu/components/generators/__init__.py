"""Rollout generators: run episodes for a batch of tasks and return their trajectories (`ctu.rollout.records.Rollout`)."""

from ctu.components.generators import tau_multiturn as tau_multiturn  # registers "tau_multiturn"
