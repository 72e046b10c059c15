"""The reward seam: components applied in the spec's order, each seeing the reward so far and the phase."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tau_bench_env.episode import EpisodeResult

Phase = Literal["train", "eval"]


@dataclass
class RewardContext:
    """What reward components see of one finished episode.

    Attributes:
        result: the finished episode (conversation, termination, errors, tau2's reward).
        task: the tau2 task.
        write_tools: the domain's write tools.
        phase: ``train`` or ``eval`` (from SkyRL's `batch_metadata.training_phase`).
        stop_reason: how the policy's last turn ended (``stop`` or ``length``).
        metrics: components add per-episode numbers here (``judge/failures`` ...).
        fatal_error: a component sets it when a failure it cannot score around makes the episode an
            infrastructure error (a judge marked fatal that failed); the episode is then left out of training.
        verdict: a judge-based component puts the judge's verdict here (``categories``, ``score``, ``error``)
            for the trajectory log.
    """

    result: EpisodeResult
    task: Any
    write_tools: frozenset[str]
    phase: Phase
    stop_reason: str = "stop"
    metrics: dict[str, float] = field(default_factory=dict)
    fatal_error: str | None = None
    verdict: dict[str, Any] | None = None

