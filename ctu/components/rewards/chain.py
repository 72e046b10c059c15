"""The reward chain: the spec's reward components applied in order, per phase.

A chain is built for one phase. The evaluation chain leaves out every training-only component (the judge's
taxonomy bonus): it is not switched off at run time, it is never in the evaluation chain at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctu.components.rewards.base import Phase, Reward, RewardContext
from ctu.metrics import REWARD, metric


@dataclass(frozen=True)
class RewardChain:
    """The built reward components of one phase, in spec order, with their spec names (built by
    `ctu.composition.build_components`)."""

    phase: Phase
    components: tuple[tuple[str, Reward], ...]

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
