"""The built-in reward components. The chain (`ctu.rollout.rewards.RewardChain`) applies them in order."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from ctu.components.rewards.base import RewardContext
from ctu.registry import ComponentParams, registry
from ctu.registry.config import Component

JudgeRef = Component("judges")


@registry.rewards.register("tau_outcome")
class TauOutcomeReward:
    """The environment's tau2 reward for the finished episode (1.0 or 0.0; 0.0 when the episode did not finish)."""

    training_only: ClassVar[bool] = False
    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds tau2's reward to the reward so far."""
        return reward + context.result.reward


@registry.rewards.register("taxonomy_feedback")
class TaxonomyFeedbackReward:
    """Adds `weight` x the judge's taxonomy score (a bonus or a penalty), in training only, never in evaluation.

    A failed or malformed judge call is counted in `judge/failures` and adds nothing, or, with
    `judge_failure_is_fatal`, makes the episode an infrastructure error, left out of training.
    """

    training_only: ClassVar[bool] = True
    needs_judge: ClassVar[bool] = True

    class Params(ComponentParams):
        weight: float = Field(0.1, ge=0.0)
        """Scale of the judge's score in [-1, 1] added to the reward."""
        judge: JudgeRef | None = None
        """The judge; null uses the spec's top-level `judge`."""
        judge_failure_is_fatal: bool = False
        """A failed judge call makes the episode an infrastructure error (left out of its GRPO group, the loss and
        success rates) instead of keeping the reward without the judge's term. For runs where the judge's
        term carries the learning signal."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.judge: Any = None
        """The built judge (its own `judge` param's, else the spec's top-level one), bound by
        `ctu.composition.build_components` before any episode (`needs_judge`)."""

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds ``weight * verdict.score``; nothing on a failed verdict (which sets `context.fatal_error` when
        the judge's failure is fatal)."""
        from ctu.components.judges.base import JudgeInput
        from ctu.metrics import JUDGE, metric

        if self.judge is None:
            raise RuntimeError("taxonomy_feedback has no judge bound: build rewards with ctu.composition.build_components")
        verdict = await self.judge.judge(JudgeInput(context.result, context.task, context.write_tools))
        context.metrics[metric(JUDGE, "calls")] = 1.0
        context.metrics[metric(JUDGE, "failures")] = float(verdict.error is not None)
        context.verdict = {"categories": list(verdict.categories), "score": verdict.score, "error": verdict.error}
        if verdict.score is None:
            if self.params.judge_failure_is_fatal:
                context.fatal_error = verdict.error or "the judge gave no score"
            return reward
        context.metrics[metric(JUDGE, "score")] = verdict.score
        return reward + self.params.weight * verdict.score


def matched_fraction(task: Any, conversation: list[dict[str, Any]]) -> float | None:
    """Fraction of the task's gold assistant actions that some tool call of the episode matches (tau2's
    `Action.compare_with_tool_call`), each call matching at most one action; None when the task has none."""
    from tau2.data_model.message import ToolCall

    criteria = getattr(task, "evaluation_criteria", None)
    gold = [a for a in (criteria.actions or []) if a.requestor == "assistant"] if criteria else []
    if not gold:
        return None
    import json

    calls = []
    for message in conversation:
        for call in message.get("tool_calls") or []:
            try:
                arguments = json.loads(call["function"]["arguments"])
            except (TypeError, ValueError):
                continue
            calls.append(ToolCall(id=call.get("id", ""), name=call["function"]["name"], arguments=arguments))
    used = [False] * len(calls)
    matched = 0
    for action in gold:
        for index, call in enumerate(calls):
            if not used[index] and action.compare_with_tool_call(call):
                used[index] = True
                matched += 1
                break
    return matched / len(gold)


@registry.rewards.register("partial_credit")
class PartialCreditReward:
    """Adds `weight` x the fraction of the task's gold actions the agent matched, so near-misses differ from failures."""

    training_only: ClassVar[bool] = False
    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        weight: float = Field(0.5, ge=0.0)
        """Scale of the matched fraction in [0, 1]."""

    def __init__(self, params: Params) -> None:
        self.params = params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds ``weight * matched_fraction`` (nothing for tasks without gold actions)."""
        fraction = matched_fraction(context.task, context.result.conversation)
        return reward if fraction is None else reward + self.params.weight * fraction


@registry.rewards.register("format_penalty")
class FormatPenaltyReward:
    """Subtracts `penalty` for each parse failure (or empty turn) in the episode, at most `max_penalty` in all."""

    training_only: ClassVar[bool] = False
    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        penalty: float = Field(0.1, ge=0.0)
        """Subtracted per turn whose tool call could not be parsed, or that was empty."""
        max_penalty: float = Field(0.5, ge=0.0)
        """Cap on the total subtracted in one episode."""

    def __init__(self, params: Params) -> None:
        self.params = params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Subtracts the capped penalty."""
        failures = context.result.failed_turns
        return reward - min(self.params.penalty * failures, self.params.max_penalty)


@registry.rewards.register("zero_on_non_stop")
class ZeroOnNonStopReward:
    """Sets the reward to 0 when the last turn ended for any reason but a stop (e.g. the length limit). Off unless listed."""

    training_only: ClassVar[bool] = False
    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    async def apply(self, reward: float, context: RewardContext) -> float:
        """0.0 unless the last turn stopped normally."""
        return reward if context.stop_reason == "stop" else 0.0
