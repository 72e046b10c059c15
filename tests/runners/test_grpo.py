"""GRPO arithmetic and the step plan of the Tinker runner."""

from __future__ import annotations

import math

import pytest

from ctu.backends.tinker.batch import StepPlan
from ctu.metrics import evaluation_metrics
from ctu.runners.grpo import group_advantages, learning_rate, skip_step, token_data, weigh_negative
from ctu.runners.task_rows import TaskRow


def test_group_advantages_are_centred_and_scaled_per_group():
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5], group_size=2)
    assert advantages[0] == pytest.approx(1 / (math.sqrt(0.5) + 1e-6) * 0.5)
    assert advantages[0] == pytest.approx(-advantages[1])
    assert advantages[2:] == [0.0, 0.0]  # a group whose rewards are equal carries no signal
    assert group_advantages([1.0, 0.0], 2, norm_by_std=False) == [0.5, -0.5]
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 0.0], 3)


def test_infrastructure_errors_are_left_out_of_their_groups_and_get_no_advantage():
    rewards = [1.0, 0.0, 0.0, 0.5, 1.0, 0.0]
    excluded = [False, False, True, True, True, False]
    advantages = group_advantages(rewards, 3, excluded=excluded)
    # the first group is normalised over its two kept rewards only, as if the failed episode had never run
    assert advantages[:2] == pytest.approx(group_advantages([1.0, 0.0], 2))
    assert advantages[2] == 0.0
    assert advantages[3:] == [0.0, 0.0, 0.0]  # one kept reward: no baseline, no signal
    assert group_advantages(rewards, 3, norm_by_std=False, excluded=excluded)[:3] == [0.5, -0.5, 0.0]
    with pytest.raises(ValueError, match="2 exclusion flags for 6"):
        group_advantages(rewards, 3, excluded=[False, True])


def test_negative_advantages_are_weighed_and_positive_ones_kept_for_lists_and_tensors():
    import torch

    advantages = group_advantages([1.0, 0.0, 0.0, 0.0], group_size=4)  # one success in four: +1.5, three -0.5
    assert weigh_negative(advantages, 1.0) == advantages
    assert weigh_negative(advantages, 0.0) == [advantages[0], 0.0, 0.0, 0.0]
    assert weigh_negative(advantages, 0.25) == pytest.approx([advantages[0]] + [advantages[1] / 4] * 3)
    tensor = torch.tensor([[advantages[0]] * 3, [advantages[1]] * 3])  # (episodes, tokens), as SkyRL holds them
    weighed = weigh_negative(tensor, 0.25)
    assert weighed.shape == (2, 3) and weighed[0].tolist() == tensor[0].tolist()
    assert weighed[1].tolist() == pytest.approx([advantages[1] / 4] * 3)
    with pytest.raises(ValueError, match=r"in \[0, 1\], not 1.5"):
        weigh_negative(advantages, 1.5)


def test_a_step_is_skipped_only_above_the_infra_error_rate():
    assert not skip_step([True, False, True, False], 0.5)
    assert skip_step([True, True, True, False], 0.5)
    assert skip_step([True], 0.0) and not skip_step([False], 0.0)
    assert not skip_step([True, True], 1.0)
    assert not skip_step([], 0.0)


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


@pytest.mark.parametrize("scheduler", ["linear", "cosine"])
def test_learning_rate_decays_after_the_warm_up_as_transformers_schedules_do(scheduler: str):
    """The tinker backend's decay is the one SkyRL's trainer gets from `transformers.get_scheduler`: optimizer step s
    (1-based) after the warm-up takes the rate the scheduler holds after s - 1 steps."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    schedule = get_scheduler(scheduler, optimizer, num_warmup_steps=3, num_training_steps=10)
    theirs = []
    for _ in range(10):
        theirs.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    ours = [learning_rate(step, 1e-3, 3, 10, scheduler) for step in range(1, 11)]
    assert ours[3:] == pytest.approx(theirs[3:])
    assert ours[:3] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3])  # ctu's warm-up: step / warmup_steps
    assert ours[3] == 1e-3 and 0 < ours[-1] < ours[-2] < ours[3]
    assert learning_rate(5, 1e-3, 0, 10, "constant") == 1e-3
    with pytest.raises(ValueError, match="needs the run's optimizer steps"):
        learning_rate(5, 1e-3, 0, None, scheduler)


def rows(n: int) -> list[TaskRow]:
    return [TaskRow("retail", str(i)) for i in range(n)]


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
    def __init__(self, task_id: str, success: bool, reward: float, infra_error: str | None = None) -> None:
        self.extras = {"task_id": task_id}
        self.success = success
        self.reward = reward
        self.infra_error = infra_error


def test_evaluation_metrics_with_pass_hat_k():
    records = [Record("a", True, 1.0), Record("a", True, 1.0), Record("b", True, 1.0), Record("b", False, 0.0)]
    metrics = evaluation_metrics("retail", records, samples=2)
    assert metrics["test-retail/average_reward"] == 0.75
    assert metrics["test-retail/success_rate"] == 0.75
    assert metrics["test-retail/pass^1"] == pytest.approx(0.75)
    assert metrics["test-retail/pass^2"] == pytest.approx(0.5)


def test_evaluation_metrics_leave_infrastructure_errors_out_of_success_and_pass_hat_k():
    down = "user simulator: 503"
    records = [Record("a", True, 1.0), Record("a", False, 0.0, down), Record("b", True, 1.0), Record("b", False, 0.0)]
    metrics = evaluation_metrics("retail", records, samples=2)
    assert metrics["test-retail/num_episodes"] == 4.0 and metrics["test-retail/num_infra_errors"] == 1.0
    assert metrics["test-retail/success_rate"] == pytest.approx(2 / 3)
    assert metrics["test-retail/average_reward"] == pytest.approx(2 / 3)
    assert metrics["test-retail/pass^1"] == pytest.approx((1.0 + 0.5) / 2)  # task a over its one real trial
    # as tau2 computes it: k goes up to the fewest trials a task kept (task a kept one), so no pass^2
    assert "test-retail/pass^2" not in metrics
    outage = evaluation_metrics("retail", [Record("a", False, 0.0, down)] * 2, samples=2)
    assert outage == {"test-retail/num_episodes": 2.0, "test-retail/num_infra_errors": 2.0}  # no rate over nothing
