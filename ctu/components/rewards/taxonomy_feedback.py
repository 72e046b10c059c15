"""`taxonomy_feedback`: the judge's taxonomy score as a training-only bonus or penalty."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.registry import ComponentParams
from ctu.registry.config import ComponentConfig, ComponentMarker

if TYPE_CHECKING:
    from ctu.components.judges.base import Judge

JudgeRef = Annotated[ComponentConfig, ComponentMarker("judges")]


class TaxonomyFeedbackReward(BaseReward):
    """Adds `weight` x the judge's taxonomy score (a bonus or a penalty), in training only, never in evaluation.

    A failed or malformed judge call is counted in `judge/failures` and adds nothing, or, with
    `judge_failure_is_fatal`, makes the episode an infrastructure error, left out of training.
    """

    training_only: ClassVar[bool] = True
    needs_judge: ClassVar[bool] = True
    project_suffix: ClassVar[str] = "_with_taxonomy_feedback"
    """Appended to the run's tracker project (`ctu.composition.tracking_project`), so runs trained with judge
    feedback never mix with runs trained without it."""

    class Params(ComponentParams):
        weight: float = Field(0.1, ge=0.0)
        """Scale of the judge's score in [-1, 1] added to the reward."""
        judge: JudgeRef | None = None
        """The judge; null uses the spec's top-level `judge`."""
        judge_failure_is_fatal: bool = False
        """A failed judge call makes the episode an infrastructure error (left out of its GRPO group, the loss and
        success rates) instead of keeping the reward without the judge's term. For runs where the judge's
        term carries the learning signal."""

    params: Params
    judge: Judge
    """The built judge (its own `judge` param's, else the spec's top-level one), handed to `BaseReward`'s
    constructor by `ctu.composition.build_components` (`needs_judge`)."""

    async def apply(self, reward: float, context: RewardContext) -> float:
        """Adds ``weight * verdict.score``; nothing on a failed verdict (which sets `context.fatal_error` when
        the judge's failure is fatal)."""
        from ctu.components.judges.base import JudgeInput
        from ctu.metrics import JUDGE, metric

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
