"""What the SkyRL experiment's Ray worker reads of the spec itself, beside SkyRL's config (`skyrl_overrides`) and
the components (`ctu.composition`): one place, importing nothing of SkyRL, so that what reaches a SkyRL run can be
listed without a Ray cluster (tests/test_fields_by_backend.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ctu.spec.models import Spec


@dataclass(frozen=True)
class WorkerSettings:
    """The worker's own settings.

    Attributes:
        run_name: `experiment.name`, the trackers' run name.
        tags: `experiment.tags`, the trackers' run tags.
        trajectory_every_n_steps, trajectory_train_samples, trajectory_seed: the trajectory log's
            (`tracking.trajectories`, `experiment.seed`).
        step_wise: each policy turn a sample of its own (`rollout.trajectory: step_wise`).
        shuffle_rewards_seed: the shuffled-reward control's seed (`experiment.seed` when `algorithm.shuffle_rewards`),
            else None.
        max_infra_error_rate: `trainer.max_infra_error_rate`.
        logprob_gap_threshold, logprob_gap_warn_mean: `algorithm.logprob_gap`'s `token_threshold` and `warn_mean`.
        negative_advantage_weight: `algorithm.negative_advantage_weight`.
        backend_name: `backend.type`, recorded in the run's state.
    """

    run_name: str
    tags: tuple[str, ...]
    trajectory_every_n_steps: int
    trajectory_train_samples: int
    trajectory_seed: int
    step_wise: bool
    shuffle_rewards_seed: int | None
    max_infra_error_rate: float
    logprob_gap_threshold: float
    logprob_gap_warn_mean: float | None
    negative_advantage_weight: float
    backend_name: str


def worker_settings(spec: Spec) -> WorkerSettings:
    """The worker's settings from `spec`."""
    trajectories = spec.tracking.trajectories
    return WorkerSettings(
        run_name=spec.experiment.name,
        tags=tuple(spec.experiment.tags),
        trajectory_every_n_steps=trajectories.every_n_steps,
        trajectory_train_samples=trajectories.train_samples,
        trajectory_seed=spec.experiment.seed,
        step_wise=spec.rollout.trajectory == "step_wise",
        shuffle_rewards_seed=spec.experiment.seed if spec.algorithm.shuffle_rewards else None,
        max_infra_error_rate=spec.trainer.max_infra_error_rate,
        logprob_gap_threshold=spec.algorithm.logprob_gap.token_threshold,
        logprob_gap_warn_mean=spec.algorithm.logprob_gap.warn_mean,
        negative_advantage_weight=spec.algorithm.negative_advantage_weight,
        backend_name=spec.backend.type,
    )
