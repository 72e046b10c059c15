"""The reward seam: components applied in the spec's order, each seeing the reward so far and the phase."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from ctu.registry import ComponentParams, registry
from tau_bench_env.outcome import EpisodeResult

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from ctu.components.judges.base import Judge

Phase = Literal["train", "eval"]


@dataclass
class RewardContext:
    """What reward components see of one finished episode.

    Attributes:
        result: the finished episode (conversation, termination, errors, tau2's reward).
        task: the tau2 task.
        write_tools: the domain's write tools.
        phase: ``train`` or ``eval``, the batch's (`ctu.rollout.records.Rollout.run_batch`).
        stop_reason: how the policy's last turn ended (``stop`` or ``length``).
        metrics: components add per-episode numbers here (``judge/failures`` ...).
        fatal_error: a component sets it when a failure it cannot score around makes the episode an
            infrastructure error (a judge marked fatal that failed); the episode is then left out of training.
        verdict: a judge-based component puts the judge's verdict here (``categories``, ``score``, ``error``)
            for the trajectory log.
    """

    result: EpisodeResult
    task: Task
    write_tools: frozenset[str]
    phase: Phase
    stop_reason: str = "stop"
    metrics: dict[str, float] = field(default_factory=dict)
    fatal_error: str | None = None
    verdict: dict[str, object] | None = None



class Reward(Protocol):
    """A built reward component (the `rewards` kind's contract, `ctu.registry.contracts`).

    `apply` gets the reward so far (0.0 before the first component) and returns the new one; a judge-based
    reward (`needs_judge`) is built as ``cls(params, judge=...)`` by the composition root; a `training_only` one is left
    out of the evaluation chain.
    """

    training_only: ClassVar[bool]
    needs_judge: ClassVar[bool]

    async def apply(self, reward: float, context: RewardContext) -> float:
        """The reward after this component."""
        ...


class BaseReward:
    """A base for reward components, built as `cls(params)`, or `cls(params, judge=...)` when the subclass sets
    `needs_judge` (the judge is then `self.judge`): no constructor of one's own is needed for either.

    A subclass defines its `Params` (a `ComponentParams`), annotates `params: Params`, sets the class flags it
    needs (`training_only`, `needs_judge`) and writes `apply`.
    """

    training_only: ClassVar[bool] = False
    """Left out of the evaluation chain when true."""
    needs_judge: ClassVar[bool] = False
    """The composition root passes the judge to the constructor (``cls(params, judge=...)``) when true."""

    class Params(ComponentParams):
        pass

    def __init__(self, params: ComponentParams, judge: Judge | None = None) -> None:
        self.params = params
        self.judge = judge
        """The spec's judge when `needs_judge` (the reward's own `judge` param, else the top-level one); else None."""


registry.rewards.declare_contract(Reward, dependencies={"needs_judge": ("judge",)})
