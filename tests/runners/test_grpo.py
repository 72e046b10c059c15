"""GRPO arithmetic and the step plan of the Tinker runner."""

from __future__ import annotations

import math

import pytest

from ctu.runners.grpo import group_advantages, learning_rate, token_data
from ctu.runners.tasks import TaskRow
from ctu.runners.tinker import StepPlan, evaluation_metrics


def test_group_advantages_are_centred_and_scaled_per_group():
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5], group_size=2)
    assert advantages[0] == pytest.approx(1 / (math.sqrt(0.5) + 1e-6) * 0.5)
    assert advantages[0] == pytest.approx(-advantages[1])
    assert advantages[2:] == [0.0, 0.0]  # a group whose rewards are equal carries no signal
    assert group_advantages([1.0, 0.0], 2, norm_by_std=False) == [0.5, -0.5]
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 0.0], 3)


def test_token_data_shifts_and_masks():
    data = token_data([10, 11], [12, 13, 14], [1, 0, 1], [-0.5, 0.0, -0.25], advantage=2.0)
    assert data.inputs == [10, 11, 12, 13]
    assert data.targets == [11, 12, 13, 14]
    assert data.advantages == [0.0, 2.0, 0.0, 2.0]  # only generated tokens carry the advantage
    assert data.logprobs == [0.0, -0.5, 0.0, -0.25]
    with pytest.raises(ValueError):
        token_data([1], [2, 3], [1], [0.0, 0.0], 1.0)


def test_learning_rate_warms_up_linearly():
    assert learning_rate(1, 1e-4, 4) == pytest.approx(2.5e-5)
    assert learning_rate(4, 1e-4, 4) == learning_rate(9, 1e-4, 4) == 1e-4
    assert learning_rate(1, 1e-4, 0) == 1e-4


def rows(n: int) -> list[TaskRow]:
    return [TaskRow({"task_id": str(i)}) for i in range(n)]


def test_step_plan_is_deterministic_and_covers_each_epoch():
    plan = StepPlan(rows(10), batch_size=3, epochs=2, seed=1, shuffle=True, max_steps=None)
    assert plan.steps_per_epoch == 3 and plan.total_steps == 6
    epoch = [row.extras["task_id"] for step in (1, 2, 3) for row in plan.batch(step)]
    assert len(set(epoch)) == 9
    assert plan.batch(2) == plan.batch(2)
    assert [r.extras for r in plan.batch(4)] != [r.extras for r in plan.batch(1)]
    capped = StepPlan(rows(10), 3, 2, 1, True, max_steps=4)
    assert capped.total_steps == 4
    small = StepPlan(rows(2), 4, 1, 0, False, None)
    assert small.total_steps == 1 and len(small.batch(1)) == 2


class Record:
    def __init__(self, task_id: str, success: bool, reward: float) -> None:
        self.extras = {"task_id": task_id}
        self.success = success
        self.reward = reward


def test_evaluation_metrics_with_pass_hat_k():
    records = [Record("a", True, 1.0), Record("a", True, 1.0), Record("b", True, 1.0), Record("b", False, 0.0)]
    metrics = evaluation_metrics("retail", records, samples=2)
    assert metrics["test-retail/average_reward"] == 0.75
    assert metrics["test-retail/success_rate"] == 0.75
    assert metrics["test-retail/pass^1"] == pytest.approx(0.75)
    assert metrics["test-retail/pass^2"] == pytest.approx(0.5)
