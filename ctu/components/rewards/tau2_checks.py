"""`tau2_checks`: tau2's dense reward, partial credit from tau2's own checks of the episode."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ctu.components.rewards.base import BaseReward, RewardContext
from ctu.metrics import REWARD, metric
from ctu.registry import ComponentParams
from tau_bench_env.outcome import CHECK_KINDS


class Tau2ChecksReward(BaseReward):
    """Adds `alpha` x the weighted share of tau2's own checks the episode passed (training only).

    tau2 scores an episode 1 only when every check of its task passes (the final database, environment
    assertions, gold actions, information to communicate, NL assertions): a near-miss and a failure both score 0.
    This reward credits each kind of check by the fraction of its checks that passed
    (`tau_bench_env.outcome.check_scores`), weights those fractions and renormalises the weights over the kinds the
    task has, so a task without, say, communicate checks is not capped below 1. An episode that did not finish has
    no checks and gets nothing. The formula, ``R = reward + alpha x share``, and the defaults (alpha 0.25; actions
    0.5, environment assertions 0.35, communicate 0.15, database 0) are slime's tau2 reward shaping
    (THUDM/slime, examples/tau-bench/tau2/reward.py, `tau2_reward_post_process`); its per-domain alpha multipliers,
    telecom weights and curriculum weights are not reproduced. Evaluation never sees it: tau2's binary reward stays
    the figure reported.
    """

    training_only: ClassVar[bool] = True

    class Params(ComponentParams):
        alpha: float = Field(0.25, ge=0.0)
        """Scale of the weighted share, which lies in [0, 1]."""
        actions: float = Field(0.5, ge=0.0)
        """Weight of the fraction of the task's gold actions the agent's tool calls matched."""
        env_assertions: float = Field(0.35, ge=0.0)
        """Weight of the fraction of the task's environment assertions that hold at the end."""
        communicate: float = Field(0.15, ge=0.0)
        """Weight of the fraction of the information the agent had to communicate that it did."""
        db: float = Field(0.0, ge=0.0)
        """Weight of the final database matching the gold one (1 or 0), for tasks whose reward checks it."""
        nl_assertions: float = Field(0.0, ge=0.0)
        """Weight of the fraction of NL assertions met (only where tau2's LLM judge evaluated them:
        `environment.evaluate_nl_assertions`)."""

    params: Params

    def share(self, checks: dict[str, float]) -> float | None:
        """The weighted share of `checks` (kind -> fraction passed) in [0, 1], the weights renormalised over the
        kinds present with a positive weight; None when there is no such kind."""
        weights = {kind: getattr(self.params, kind) for kind in CHECK_KINDS if kind in checks and getattr(self.params, kind) > 0}
        total = sum(weights.values())
        return sum(weight * checks[kind] for kind, weight in weights.items()) / total if total else None

    async def apply(self, reward: float, context: RewardContext) -> float:
        """The reward so far plus `alpha` x the share; unchanged when the episode has no weighted checks."""
        share = self.share(context.result.checks)
        if share is None:
            return reward
        context.metrics[metric(REWARD, "tau2_checks_share")] = share
        return reward + self.params.alpha * share
