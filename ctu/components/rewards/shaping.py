"""Reward shaping on top of tau2's outcome: `partial_credit`, `format_penalty`, `zero_on_non_stop`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from tau2.data_model.message import ToolCall
    from tau2.data_model.tasks import Action, Task


def agent_tool_calls(trajectory: Sequence[object]) -> list[ToolCall]:
    """The agent's tool calls in a tau2 trajectory (`EpisodeResult.trajectory`), in order: tau2 `ToolCall`s,
    read the same way in text and native mode."""
    return [call for message in trajectory if getattr(message, "role", None) == "assistant"
            for call in (getattr(message, "tool_calls", None) or [])]


Match = Literal["call", "name", "arguments"]


def argument_credit(action: Action, call: ToolCall) -> float:
    """How much of a gold action's arguments a call with its tool name reproduces, in [0, 1]: for each compared
    argument (tau2's `compare_args`, else all of the action's), the fraction of the gold value's characters the
    call's value has at the same place (values as JSON text; a string's quotes left out), averaged over the
    arguments; 1.0 for an action without arguments, 0.0 for another tool.

    Example: gold ``{"task_id": "task_470", "status": "pending"}`` against ``{"task_id": "task_435", "status":
    "pending"}``: (6/8 + 7/7) / 2 = 0.875. Positional, so a dropped character costs the rest of the value.
    """
    if call.name != action.name:
        return 0.0
    keys = list(action.compare_args) if action.compare_args is not None else list(action.arguments)
    if not keys:
        return 1.0
    total = 0.0
    for key in keys:
        gold, got = _as_text(action.arguments.get(key)), _as_text(call.arguments.get(key))
        longest = max(len(gold), len(got))
        total += 1.0 if longest == 0 else sum(a == b for a, b in zip(gold, got)) / longest
    return total / len(keys)


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def matched_fraction(task: Task, trajectory: Sequence[object], first: int | None = None,
                     match: Match = "call") -> float | None:
    """Fraction of the task's gold assistant actions that some tool call of the episode matches, each call
    matching at most one action; None when the task has none.

    Args:
        task: the tau2 task.
        trajectory: the episode's tau2 messages (`EpisodeResult.trajectory`).
        first: only the task's first `first` gold assistant actions count (None: all).
        match: ``call``: tau2's `Action.compare_with_tool_call` decides (name and the compared arguments), 1 or 0;
            ``name``: the same tool name, whatever its arguments; ``arguments``: each action earns its
            `argument_credit` from the unused call that earns the most (a near-miss argument counts in part).
    """
    criteria = getattr(task, "evaluation_criteria", None)
    gold = [a for a in (criteria.actions or []) if a.requestor == "assistant"] if criteria else []
    if first is not None:
        gold = gold[:first]
    if not gold:
        return None
    calls = agent_tool_calls(trajectory)
    used = [False] * len(calls)
    matched = 0.0
    for action in gold:
        credits = [0.0 if used[index] else _credit(action, call, match) for index, call in enumerate(calls)]
        best = max(range(len(calls)), key=credits.__getitem__, default=None)
        if best is not None and credits[best] > 0.0:
            used[best] = True
            matched += credits[best]
    return matched / len(gold)


def _credit(action: Action, call: ToolCall, match: Match) -> float:
    if match == "arguments":
        return argument_credit(action, call)
    return float(call.name == action.name if match == "name" else action.compare_with_tool_call(call))


class PartialCreditReward(BaseReward):
    """Adds `weight` x the fraction of the task's gold actions the agent matched, so near-misses differ from failures."""

    class Params(ComponentParams):
        weight: float = Field(0.5, ge=0.0)
        """Scale of the matched fraction in [0, 1]."""
        first_actions: int | None = Field(None, gt=0)
        """Only the task's first N gold agent actions count (null: all): credit for starting right, a curriculum
        for a policy that cannot yet finish a task."""
        match: Match = "call"
        """`call`: a call matches a gold action as tau2 compares them (tool name and arguments); `name`: the tool
        name alone (credit for choosing the right tool before its arguments are right); `arguments`: the right
        tool earns the share of the gold arguments' characters it wrote in place (`argument_credit`: a near-miss id
        earns more than another id, so a group whose episodes all failed can still have a reward spread)."""

    params: Params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds ``weight * matched_fraction`` (nothing for tasks without gold actions)."""
        params = self.params
        fraction = matched_fraction(context.task, context.result.trajectory, params.first_actions, match=params.match)
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
