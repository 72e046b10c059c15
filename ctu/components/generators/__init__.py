"""Rollout generators: run episodes for a batch of tasks and return token ids, loss masks and rewards."""

from ctu.components.generators import tau_multiturn as tau_multiturn  # registers "tau_multiturn"
