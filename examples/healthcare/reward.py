"""`verified_first`: a reward wrapper that enforces the clinic policy's identity rule.

It sees the reward the rewards before it produced (usually `tau_outcome`'s) and the finished episode, and takes a
penalty when the agent changed anything (a write tool) before it had found the patient with `find_patient`. tau2's
database comparison cannot see the order of calls; this reward can.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.components.rewards.shaping import agent_tool_calls
from ctu.registry import ComponentParams, registry


@registry.rewards.register("verified_first")
class VerifiedFirstReward(BaseReward):
    """Subtracts `penalty` when a write tool ran before the patient was found with `find_patient`."""

    training_only: ClassVar[bool] = True
    """Shaping for training: evaluation reports tau2's reward alone."""

    class Params(ComponentParams):
        penalty: float = Field(0.5, ge=0)
        """Subtracted once per episode that breaks the rule."""

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """`reward` minus `penalty` if a write tool (`context.write_tools`) came before `find_patient`."""
        for name in (call.name for call in agent_tool_calls(context.result.trajectory)):
            if name == "find_patient":
                return reward
            if name in context.write_tools:
                context.metrics["verified_first/violations"] = 1.0
                return reward - self.params.penalty
        return reward
