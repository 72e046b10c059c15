"""The built-in reward components (their params; the reward chain runs them in the generator)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ctu.registry import ComponentParams, registry
from ctu.registry.config import Component

JudgeRef = Component("judges")


@registry.rewards.register("tau_outcome")
class TauOutcomeReward:
    """The environment's tau2 reward for the finished episode (1.0 or 0.0; 0.0 when the episode did not finish)."""

    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.rewards.register("taxonomy_feedback")
class TaxonomyFeedbackReward:
    """Adds `weight` x the judge's taxonomy score (a bonus or a penalty), in training only, never in evaluation."""

    needs_judge: ClassVar[bool] = True

    class Params(ComponentParams):
        weight: float = Field(0.1, ge=0.0)
        """Scale of the judge's score in [-1, 1] added to the reward."""
        judge: JudgeRef | None = None
        """The judge; null uses the spec's top-level `judge`."""

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.rewards.register("partial_credit")
class PartialCreditReward:
    """Adds `weight` x the fraction of the task's gold actions the agent matched, so near-misses differ from failures."""

    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        weight: float = Field(0.5, ge=0.0)
        """Scale of the matched fraction in [0, 1]."""

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.rewards.register("format_penalty")
class FormatPenaltyReward:
    """Subtracts `penalty` for each parse failure in the episode, at most `max_penalty` in all."""

    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        penalty: float = Field(0.1, ge=0.0)
        """Subtracted per turn whose tool call could not be parsed."""
        max_penalty: float = Field(0.5, ge=0.0)
        """Cap on the total subtracted in one episode."""

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.rewards.register("zero_on_non_stop")
class ZeroOnNonStopReward:
    """Sets the reward to 0 when the last turn ended for any reason but a stop (e.g. the length limit). Off unless listed."""

    needs_judge: ClassVar[bool] = False

    class Params(ComponentParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params
