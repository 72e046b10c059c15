"""`tau_outcome`: tau2's own reward for the finished episode."""

from __future__ import annotations

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.registry import ComponentParams


class TauOutcomeReward(BaseReward):
    """The environment's tau2 reward for the finished episode (1.0 or 0.0; 0.0 when the episode did not finish)."""

    class Params(ComponentParams):
        pass

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds tau2's reward to the reward so far."""
        return reward + context.result.reward
