"""Reward components, applied in the spec's order; each sees the reward so far and the training phase."""

from ctu.components.rewards.base import BaseReward, Reward, RewardContext

__all__ = ["BaseReward", "Reward", "RewardContext"]
