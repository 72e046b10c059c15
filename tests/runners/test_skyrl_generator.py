"""SkyRL's adapter over ctu's rollout contract (`ctu.backends.skyrl.generator`): what SkyRL's trainer hands the
generator reaches `Rollout.run_batch` as ctu's arguments, and the records come back as SkyRL's `GeneratorOutput`.
The rollout here returns records made in the test: the agent loop itself is tests/rollout/test_generator.py's."""

from __future__ import annotations

import asyncio
import logging

from skyrl.train.generators.base import BatchMetadata

from ctu.backends.skyrl.datasets import ENV_CLASS
from ctu.backends.skyrl.generator import SkyRLGenerator
from ctu.rollout.records import RolloutBatch, TrajectoryRecord, rollout_metrics
from tau_bench_env.outcome import EpisodeResult


def record(task: str, reward: float, logprobs: list[float], infra_error: str | None = None) -> TrajectoryRecord:
    result = EpisodeResult("retail", task, turns=2, termination="user_stop", reward=reward)
    return TrajectoryRecord([1, 2], [3, 4], [1, 0], logprobs, reward, "stop", result,
                            extras={"domain": "retail", "task_id": task, "test_set": "retail"}, infra_error=infra_error)


class Recorded:
    """A rollout that returns one record per episode asked for (task ids from the requests), noting each call."""

    def __init__(self, logprobs: list[float]) -> None:
        self.logprobs = logprobs
        self.calls: list[tuple[int, str, int]] = []

    async def run_batch(self, requests, phase, step):
        self.calls.append((len(requests), phase, step))
        self.requests = list(requests)
        records = [record(request.task.task_id, 1.0 if n else 0.0, self.logprobs, None if n else "user simulator: 503")
                   for n, request in enumerate(requests)]
        return RolloutBatch(records, {**rollout_metrics(records), "timing/generate": 0.5})

    async def run_episode(self, request, phase):
        raise AssertionError("SkyRL's adapter runs batches")


def skyrl_input(tasks: list[str], phase: str | None, step: int = 3) -> dict:
    return {
        "prompts": [[{"role": "system", "content": "x"}] for _ in tasks],
        "env_classes": [ENV_CLASS] * len(tasks),
        "env_extras": [{"domain": "retail", "task_id": task} for task in tasks],
        "sampling_params": None,
        "trajectory_ids": None,
        "batch_metadata": None if phase is None else BatchMetadata(global_step=step, training_phase=phase),
    }


def test_the_adapter_runs_skyrls_batch_through_run_batch_and_returns_skyrls_output():
    rollout = Recorded(logprobs=[-0.5, 0.0])
    generator = SkyRLGenerator(rollout)
    output = asyncio.run(generator.generate(skyrl_input(["1", "2"], "train")))
    assert rollout.calls == [(2, "train", 3)]
    # each row's extras read as a typed task; the sample index left to the rollout, which counts a task's samples
    assert [(r.task.domain, r.task.task_id, r.sample) for r in rollout.requests] == [("retail", "1", None), ("retail", "2", None)]
    assert rollout.requests[0].prompt == [{"role": "system", "content": "x"}]
    assert output["prompt_token_ids"] == [[1, 2]] * 2 and output["response_ids"] == [[3, 4]] * 2
    assert output["loss_masks"] == [[1, 0]] * 2 and output["rewards"] == [0.0, 1.0] and output["stop_reasons"] == ["stop"] * 2
    assert output["rollout_logprobs"] == [[-0.5, 0.0]] * 2
    assert output["rollout_metrics"]["timing/generate"] == 0.5
    assert output["rollout_metrics"]["environment/infra_errors"] == 1.0
    # each trajectory carries its infrastructure-error flag, which ctu's SkyRL trainers read (`exclusion`)
    assert [row["infra_error"] for row in output["env_metrics"]] == ["user simulator: 503", None]
    assert [row["task_id"] for row in output["env_metrics"]] == ["1", "2"]
    assert generator.pop_eval_records() == []  # a training batch is no evaluation


def test_evaluation_records_are_gathered_over_skyrls_batches_until_popped():
    generator = SkyRLGenerator(Recorded(logprobs=[-0.5, 0.0]))
    asyncio.run(generator.generate(skyrl_input(["1"], "eval")))
    asyncio.run(generator.generate(skyrl_input(["2", "3"], "eval")))
    assert [r.result.task_id for r in generator.pop_eval_records()] == ["1", "2", "3"]
    assert generator.pop_eval_records() == []


def test_a_trajectory_without_sampled_logprobs_gives_skyrl_none_for_the_batch():
    """SkyRL takes rollout logprobs for every trajectory or none: 0.0 for every token would be trained against."""
    output = asyncio.run(SkyRLGenerator(Recorded(logprobs=[])).generate(skyrl_input(["1", "2"], "train")))
    assert output["rollout_logprobs"] is None and output["rewards"] == [0.0, 1.0]


def test_a_batch_without_its_phase_is_evaluation_said_once(caplog):
    """No training-only reward may reach a batch whose phase is unknown."""
    rollout = Recorded(logprobs=[-0.5, 0.0])
    generator = SkyRLGenerator(rollout)
    with caplog.at_level(logging.WARNING, logger="ctu.backends.skyrl.generator"):
        asyncio.run(generator.generate(skyrl_input(["1"], None)))
        asyncio.run(generator.generate(skyrl_input(["2"], None)))
    assert rollout.calls == [(1, "eval", 0), (1, "eval", 0)]
    assert sum("no batch_metadata" in message for message in caplog.messages) == 1
    assert len(generator.pop_eval_records()) == 2


def test_step_wise_rows_are_each_episodes_turns_in_order_as_skyrls_step_wise_trainer_checks_them():
    from skyrl.train.generators.base import TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    from ctu.rollout.records import TurnSample

    turns = [TurnSample([1, 2], [3], [-0.5], [1]), TurnSample([1, 2, 3, 9], [4], [-1.0], [1])]
    records = [record("1", 1.0, [-0.5, 0.0]), record("1", 0.0, [-0.5, 0.0]), record("2", 0.0, [-0.5, 0.0], "user simulator: 503")]
    records[0].turn_samples, records[1].turn_samples = list(turns), turns[:1]  # the third, an error, trains whole

    class Fixed(Recorded):
        async def run_batch(self, requests, phase, step):
            return RolloutBatch(records, rollout_metrics(records))

    ids = [TrajectoryID("1", 0), TrajectoryID("1", 1), TrajectoryID("2", 0)]
    output = asyncio.run(SkyRLGenerator(Fixed([]), step_wise=True).generate({**skyrl_input(["1", "1", "2"], "train"), "trajectory_ids": ids}))
    validate_generator_output(3, output, step_wise=True)  # SkyRL's own check: contiguous, last steps marked
    assert output["prompt_token_ids"] == [[1, 2], [1, 2, 3, 9], [1, 2], [1, 2]]
    assert output["response_ids"] == [[3], [4], [3], [3, 4]]
    assert output["is_last_step"] == [False, True, True, True]
    assert output["trajectory_ids"] == [ids[0], ids[0], ids[1], ids[2]]
    assert output["rewards"] == [1.0, 1.0, 0.0, 0.0]  # SkyRL reads the last step's; every step carries the episode's
    assert output["rollout_logprobs"] == [[-0.5], [-1.0], [-0.5], [-0.5, 0.0]]
    assert [row["infra_error"] for row in output["env_metrics"]] == [None, None, None, "user simulator: 503"]


class Dealt:
    """A rollout whose episodes score `rewards`, in order (two samples of each task asked for)."""

    def __init__(self, rewards: list[float]) -> None:
        self.rewards = rewards

    async def run_batch(self, requests, phase, step):
        records = [record(request.task.task_id, reward, [-0.5, 0.0]) for request, reward in zip(requests, self.rewards, strict=True)]
        return RolloutBatch(records, rollout_metrics(records))

    async def run_episode(self, request, phase):
        raise AssertionError("SkyRL's adapter runs batches")


def test_the_shuffled_reward_control_hands_skyrl_each_groups_rewards_dealt_out_anew():
    """`algorithm.shuffle_rewards` on SkyRL's trainer: a training batch's rewards reach SkyRL shuffled within each
    task's group (seeded by the experiment's seed, the step and the batch), with ``train/shuffled_rewards``;
    evaluation batches and the episodes' own tau2 rewards are left alone."""
    rewards, tasks = [1.0, 0.0, 0.0, 1.0], ["1", "1", "2", "2"]
    deals = set()
    for seed in range(8):
        generator = SkyRLGenerator(Dealt(rewards), shuffle_rewards_seed=seed)
        output = asyncio.run(generator.generate(skyrl_input(tasks, "train")))
        dealt = output["rewards"]
        assert sorted(dealt[:2]) == sorted(dealt[2:]) == [0.0, 1.0]
        assert output["rollout_metrics"]["train/shuffled_rewards"] == sum(d != r for d, r in zip(dealt, rewards)) / 4
        assert output["rollout_metrics"]["generation/avg_reward"] == 0.5  # a group's mean is what it was
        assert [row["raw_reward"] for row in output["env_metrics"]] == rewards  # tau2's own, for ctu's figures
        again = asyncio.run(SkyRLGenerator(Dealt(rewards), shuffle_rewards_seed=seed).generate(skyrl_input(tasks, "train")))
        assert again["rewards"] == dealt
        deals.add(tuple(dealt))
        evaluation = asyncio.run(generator.generate(skyrl_input(tasks, "eval")))
        assert evaluation["rewards"] == rewards and "train/shuffled_rewards" not in evaluation["rollout_metrics"]
    assert len(deals) > 1
    plain = asyncio.run(SkyRLGenerator(Dealt(rewards)).generate(skyrl_input(tasks, "train")))
    assert plain["rewards"] == rewards and "train/shuffled_rewards" not in plain["rollout_metrics"]


def test_a_training_batch_where_no_episode_reached_the_policy_stops_the_run_as_nothing_measured():
    """On SkyRL's trainer too: a training batch whose finished episodes all ended before the policy's first turn
    raises `NothingMeasuredError` (the entrypoint hands a `CtuError` back as itself: exit 3); evaluation batches
    are reported, not refused."""
    import pytest

    from ctu.errors import NothingMeasuredError

    class Overflowing(Recorded):
        async def run_batch(self, requests, phase, step):
            records = [TrajectoryRecord([1, 2], [], [], [], 0.0, "length", EpisodeResult(
                "retail", request.task.task_id, termination="context_overflow")) for request in requests]
            return RolloutBatch(records, rollout_metrics(records))

    with pytest.raises(NothingMeasuredError, match="training step 3: none of its 2 finished episode"):
        asyncio.run(SkyRLGenerator(Overflowing([])).generate(skyrl_input(["1", "2"], "train")))
    assert asyncio.run(SkyRLGenerator(Overflowing([])).generate(skyrl_input(["1", "2"], "eval")))["rewards"] == [0.0, 0.0]
