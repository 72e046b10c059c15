"""One naming scheme for every metric ctu logs: ``<area>/<name>``.

Areas: `generation` (rollout outcomes), `reward` (the reward chain), `environment` (episodes), `judge`, `user`,
`timing`, `train`, `eval`, and ``test-<name>`` for each named test set. Every metric name ctu emits is built
by the functions here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def area_of_test_set(test_set: str) -> str:
    """The area of a named test set: ``test-<name>``."""
    return f"test-{test_set}"


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
