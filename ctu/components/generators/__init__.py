"""Rollout generators: run episodes for a batch of tasks and return their trajectories (`ctu.rollout.records.Rollout`)."""

from ctu.components.generators.base import GeneratorComponent, LoopSettings

__all__ = ["GeneratorComponent", "LoopSettings"]
