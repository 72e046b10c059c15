"""Reward shaping on top of tau2's outcome: `partial_credit`, `format_penalty`, `zero_on_non_stop`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from tau2.data_model.message import ToolCall
    from tau2.data_model.tasks import Task


def agent_tool_calls(trajectory: Sequence[object]) -> list[ToolCall]:
    """The agent's tool calls in a tau2 trajectory (`EpisodeResult.trajectory`), in order: tau2 `ToolCall`s,
    read the same way in text and native mode."""
    return [call for message in trajectory if getattr(message, "role", None) == "assistant"
            for call in (getattr(message, "tool_calls", None) or [])]


def matched_fraction(task: Task, trajectory: Sequence[object], first: int | None = None, by_name: bool = False) -> float | None:
    """Fraction of the task's gold assistant actions that some tool call of the episode matches, each call
    matching at most one action; None when the task has none.

    Args:
        task: the tau2 task.
        trajectory: the episode's tau2 messages (`EpisodeResult.trajectory`).
        first: only the task's first `first` gold assistant actions count (None: all).
        by_name: a call matches an action with the same tool name, whatever its arguments; else tau2's
            `Action.compare_with_tool_call` decides (name and the compared arguments).
    """
    criteria = getattr(task, "evaluation_criteria", None)
    gold = [a for a in (criteria.actions or []) if a.requestor == "assistant"] if criteria else []
    if first is not None:
        gold = gold[:first]
    if not gold:
        return None
    calls = agent_tool_calls(trajectory)
    used = [False] * len(calls)
    matched = 0
    for action in gold:
        for index, call in enumerate(calls):
            if not used[index] and (call.name == action.name if by_name else action.compare_with_tool_call(call)):
                used[index] = True
                matched += 1
                break
    return matched / len(gold)


class PartialCreditReward(BaseReward):
    """Adds `weight` x the fraction of the task's gold actions the agent matched, so near-misses differ from failures."""

    class Params(ComponentParams):
        weight: float = Field(0.5, ge=0.0)
        """Scale of the matched fraction in [0, 1]."""
        first_actions: int | None = Field(None, gt=0)
        """Only the task's first N gold agent actions count (null: all): credit for starting right, a curriculum
        for a policy that cannot yet finish a task."""
        match: Literal["call", "name"] = "call"
        """`call`: a call matches a gold action as tau2 compares them (tool name and arguments); `name`: the tool
        name alone (credit for choosing the right tool before its arguments are right)."""

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds ``weight * matched_fraction`` (nothing for tasks without gold actions)."""
        params = self.params
        fraction = matched_fraction(context.task, context.result.trajectory, params.first_actions, params.match == "name")
        return reward if fraction is None else reward + params.weight * fraction



class FormatPenaltyReward(BaseReward):
    """Subtracts `penalty` for each parse failure (or empty turn) in the episode, at most `max_penalty` in all."""

    class Params(ComponentParams):
        penalty: float = Field(0.1, ge=0.0)
        """Subtracted per turn whose tool call could not be parsed, or that was empty."""
        max_penalty: float = Field(0.5, ge=0.0)
        """Cap on the total subtracted in one episode."""

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Subtracts the capped penalty."""
        failures = context.result.failed_turns
        return reward - min(self.params.penalty * failures, self.params.max_penalty)



class ZeroOnNonStopReward(BaseReward):
    """Sets the reward to 0 when the last turn ended for any reason but a stop (e.g. the length limit). Off unless listed."""

    class Params(ComponentParams):
        pass

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """0.0 unless the last turn stopped normally."""
        return reward if context.stop_reason == "stop" else 0.0
