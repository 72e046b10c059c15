"""GRPO arithmetic and the step plan of the Tinker runner."""

from __future__ import annotations

import math

import pytest

from ctu.backends.tinker.batch import StepPlan
from ctu.metrics import evaluation_metrics
from ctu.rollout.records import TrajectoryRecord
from ctu.runners.grpo import (
    SHUFFLED_REWARDS,
    group_advantages,
    learning_rate,
    shuffle_group_rewards,
    shuffle_record_rewards,
    skip_step,
    token_data,
    weigh_negative,
)
from ctu.runners.task_rows import TaskRow
from tau_bench_env.outcome import EpisodeResult


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


def test_shuffled_rewards_keep_each_groups_rewards_and_deal_them_out_at_random():
    # two groups interleaved (a group's members need not be adjacent), one infrastructure error
    rewards = [1.0, 0.0, 0.5, 0.0, 0.25, 1.0, 0.0]
    groups = ["a", "b", "a", "b", "a", "b", "a"]
    excluded = [False, False, False, False, False, False, True]
    deals = {seed: shuffle_group_rewards(rewards, groups, excluded, f"7/1/{seed}") for seed in range(400)}
    for dealt in deals.values():
        for group in "ab":  # the group's rewards as a multiset: its mean, spread and advantage magnitudes
            assert sorted(r for r, g, out in zip(dealt, groups, excluded) if g == group and not out) == \
                sorted(r for r, g, out in zip(rewards, groups, excluded) if g == group and not out)
        assert dealt[6] == 0.0  # the excluded trajectory keeps its own
        assert sorted(abs(a) for a in group_advantages(dealt, 1, True, excluded)) == sorted(abs(a) for a in group_advantages(rewards, 1, True, excluded))
    assert deals[3] == shuffle_group_rewards(rewards, groups, excluded, "7/1/3")  # seeded: a resumed step deals alike
    # each of group a's rewards reaches each of its 3 places about a third of the time
    for place in (0, 2, 4):
        shares = [sum(dealt[place] == value for dealt in deals.values()) / len(deals) for value in (1.0, 0.5, 0.25)]
        assert all(0.25 < share < 0.42 for share in shares), shares
    assert shuffle_group_rewards([], [], [], "x") == []


def test_shuffled_record_rewards_move_between_a_tasks_episodes_only():
    def record(task: str, reward: float, infra_error: str | None = None) -> TrajectoryRecord:
        return TrajectoryRecord([1], [2], [1], [-0.1], reward, "stop", EpisodeResult("retail", task, reward=reward), infra_error=infra_error)

    records = [record("1", 1.0), record("1", 0.0), record("2", 0.0), record("2", 0.0), record("3", 1.0, "user simulator: 503"), record("3", 0.0)]
    moved = [shuffle_record_rewards(records, f"0/1/{seed}") for seed in range(50)]
    assert sorted(r.reward for r in records[:2]) == [0.0, 1.0]
    assert [r.reward for r in records[2:]] == [0.0, 0.0, 1.0, 0.0]  # alike rewards, and a group of one kept trajectory
    assert [r.result.reward for r in records] == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]  # tau2's own, for every figure
    # task 1's two episodes swap (2 of the 5 kept records) or stay, from one deal to the next
    assert {m[SHUFFLED_REWARDS] for m in moved} == {0.0, 0.4}
    assert shuffle_record_rewards([record("1", 1.0, "judge: down")], "0") == {}


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
