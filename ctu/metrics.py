"""One naming scheme for every metric ctu logs: ``<area>/<name>``.

Areas: `generation` (rollout outcomes), `reward` (the reward chain), `environment` (episodes), `judge`, `user`,
`timing`, `train`, `eval`, ``test-<name>`` for each named test set and `validation` for the validation set. Every metric name ctu emits is built
by the functions here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

GENERATION = "generation"
REWARD = "reward"
ENVIRONMENT = "environment"
JUDGE = "judge"
USER = "user"
TIMING = "timing"
TRAIN = "train"
EVAL = "eval"


def metric(area: str, name: str) -> str:
    """``area/name``."""
    return f"{area}/{name}"


VALIDATION = "validation"
"""The name the validation set (`data.validation`) is evaluated under, and its metrics' area."""


def area_of_test_set(test_set: str) -> str:
    """The area of an evaluation set: ``test-<name>`` for a named test set, ``validation`` for the validation set
    (`VALIDATION`)."""
    return VALIDATION if test_set == VALIDATION else f"test-{test_set}"


def mean(values: Iterable[float]) -> float:
    """The mean, 0.0 for no values (an empty batch logs zeros, never NaN)."""
    values = list(values)
    return float(sum(values) / len(values)) if values else 0.0


def pass_hat_k(n: int, c: int, k: int) -> float:
    """tau-bench's pass^k for one task: the chance that k of its n trials, drawn without replacement, all
    succeed, given c successes: C(c, k) / C(n, k) (Yao et al. 2024, arXiv:2406.12045, eq. 1).

    Raises:
        ValueError: k > n or c > n.
    """
    if k > n or c > n or min(n, c, k) < 0:
        raise ValueError(f"pass^k needs 0 <= c, k <= n; got n={n}, c={c}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


SUCCESS_TOLERANCE = 1e-6
"""A reward within this of 1.0 is a success (tau2's `is_successful`, tau2/metrics/agent_metrics.py)."""


def is_success(reward: float) -> bool:
    """Whether tau2's reward counts the episode a success (1.0, within `SUCCESS_TOLERANCE`)."""
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def pass_hat_ks(successes: dict[str, list[bool]]) -> dict[int, float]:
    """pass^k of a set of tasks, k = 1 .. the fewest trials any task has, as tau2 computes it
    (`tau2.metrics.agent_metrics.compute_metrics`): each task's `pass_hat_k`, averaged over the tasks.

    Args:
        successes: task id -> one success flag per trial that measured the policy (infrastructure errors
            already left out, as tau2 leaves its failed simulations out). A task with no trial is left out.

    Returns:
        ``{k: pass^k}``; empty when no task has a trial.
    """
    trials = {task: flags for task, flags in successes.items() if flags}
    if not trials:
        return {}
    max_k = min(len(flags) for flags in trials.values())
    return {k: mean(pass_hat_k(len(flags), sum(flags), k) for flags in trials.values()) for k in range(1, max_k + 1)}


class ScoredEpisode(Protocol):
    """What `evaluation_metrics` reads of an episode's record (`ctu.rollout.records.TrajectoryRecord` has it)."""

    @property
    def reward(self) -> float: ...

    @property
    def success(self) -> bool: ...

    @property
    def infra_error(self) -> str | None: ...

    @property
    def extras(self) -> dict[str, object]: ...


def evaluation_metrics(name: str, records: Sequence[ScoredEpisode], samples: int) -> dict[str, float]:
    """One test set's ``test-<name>/average_reward``, ``success_rate`` and ``pass^k`` for k = 1..`samples`,
    from its `TrajectoryRecord`s (`samples` of each task).

    Infrastructure errors (`infra_error`) are left out, as tau2 leaves skipped simulations out of pass^k, and
    counted in ``num_infra_errors``; pass^k then goes up to the fewest trials any task kept (`pass_hat_ks`). A
    figure over no episode is absent.
    """
    area = area_of_test_set(name)
    valid = [r for r in records if r.infra_error is None]
    metrics = {
        metric(area, "num_episodes"): float(len(records)),
        metric(area, "num_infra_errors"): float(len(records) - len(valid)),
    }
    if valid:
        metrics[metric(area, "average_reward")] = mean(r.reward for r in valid)
        metrics[metric(area, "success_rate")] = mean(float(r.success) for r in valid)
    by_task: dict[str, list[bool]] = defaultdict(list)
    for record in valid:
        by_task[str(record.extras.get("task_id"))].append(record.success)
    for k, value in pass_hat_ks(by_task).items():
        if k <= samples:
            metrics[metric(area, f"pass^{k}")] = value
    return metrics
