"""The reward chain: the spec's reward components applied in order, per phase.

A chain is built for one phase. The evaluation chain leaves out every training-only component (the judge's
taxonomy bonus): it is not switched off at run time, it is never in the evaluation chain at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctu.components.rewards.base import Phase, RewardContext
from ctu.metrics import REWARD, metric


@dataclass
class RewardChain:
    """Built reward components for one phase, with their spec names."""

    phase: Phase
    components: list[tuple[str, Any]]
    judge: Any = None

    @classmethod
    def build(cls, rewards: Sequence[Any], phase: Phase, judge: Any = None) -> RewardChain:
        """Build the chain of `rewards` (spec `ComponentConfig`s) for `phase`; `judge`: the spec's top-level
        judge config."""
        components = []
        for config in rewards:
            component = config.build()
            if phase == "eval" and getattr(component, "training_only", False):
                continue
            components.append((config.type, component))
        return cls(phase, components, judge)

    async def score(self, context: RewardContext) -> tuple[float, dict[str, float]]:
        """The final reward of one episode and its per-component metrics (``reward/<name>/contribution``)."""
        reward = 0.0
        metrics: dict[str, float] = {}
        for name, component in self.components:
            before = reward
            reward = await component.apply(reward, context)
            metrics[metric(REWARD, f"{name}/contribution")] = reward - before
        metrics.update(context.metrics)
        return reward, metrics
