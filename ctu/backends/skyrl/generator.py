"""`SkyRLGenerator`: ctu's rollout (`ctu.rollout.records.Rollout`) as SkyRL's `GeneratorInterface`, the one place
ctu's records become SkyRL's types.

SkyRL's trainer hands the generator a `GeneratorInput` (prompts, each episode's ``env_extras``, the phase and
global step in ``batch_metadata``) and takes a `GeneratorOutput` back. The adapter runs the batch through
`Rollout.run_batch` and gives each trajectory an ``env_metrics`` row (`episode_row`) with its ``infra_error``:
ctu's SkyRL trainers read the flag there (`ctu.backends.skyrl.exclusion`), since SkyRL moves trajectories between
batches (dynamic sampling, fully async training). SkyRL evaluates in several batches, so the adapter gathers the
evaluation records for ctu's evaluation metrics (`pop_eval_records`).
"""

from __future__ import annotations

import logging
from typing import Any

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput

from ctu.components.rewards.base import Phase
from ctu.rollout.records import Rollout, RolloutBatch, TrajectoryRecord
from ctu.rollout.requests import EpisodeRequest, TaskRow
from ctu.runners.grpo import shuffle_record_rewards, unplayed_step

logger = logging.getLogger(__name__)


class SkyRLGenerator(GeneratorInterface):
    """SkyRL's generator over a ctu `Rollout` (see the module docstring).

    Attributes:
        rollout: the rollout every batch runs through.
    """

    def __init__(self, rollout: Rollout, step_wise: bool = False, shuffle_rewards_seed: int | None = None) -> None:
        self.rollout = rollout
        self.step_wise = step_wise
        """Give SkyRL each training episode's policy turns as rows of their own (``rollout.trajectory:
        step_wise``, SkyRL's `generator.step_wise_trajectories`; `step_rows`)."""
        self.shuffle_rewards_seed = shuffle_rewards_seed
        """The experiment's seed under ``algorithm.shuffle_rewards`` (the shuffled-reward control: each training
        batch's rewards dealt out within their groups, `ctu.runners.grpo.shuffle_record_rewards`), else None."""
        self._train_batches: dict[int, int] = {}
        self._eval_records: list[TrajectoryRecord] = []
        self._warned_no_phase = False

    def pop_eval_records(self) -> list[TrajectoryRecord]:
        """Every evaluation-phase record since the last call, in the order run, and forget them."""
        records, self._eval_records = self._eval_records, []
        return records

    def _phase(self, input_batch: GeneratorInput) -> tuple[Phase, int]:
        """The batch's phase and global step; a batch without ``batch_metadata`` is evaluation at step 0 (so no
        training-only reward can reach it), said once."""
        metadata = input_batch.get("batch_metadata")
        if metadata is None:
            if not self._warned_no_phase:
                logger.warning("generate() got no batch_metadata: treating the batch as evaluation (no training-only rewards)")
                self._warned_no_phase = True
            return "eval", 0
        return ("eval" if metadata.training_phase == "eval" else "train"), int(metadata.global_step or 0)

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """The batch's episodes (`Rollout.run_batch`) as SkyRL's output, in input order."""
        phase, step = self._phase(input_batch)
        batch = await self.rollout.run_batch(episode_requests(input_batch), phase, step)
        if phase == "eval":
            self._eval_records += batch.records
        elif unplayed := unplayed_step(step, batch.records):
            raise unplayed
        elif self.shuffle_rewards_seed is not None:
            batch_index = self._train_batches[step] = self._train_batches.get(step, 0) + 1
            batch.metrics.update(shuffle_record_rewards(batch.records, f"{self.shuffle_rewards_seed}/{step}/{batch_index}"))
        if self.step_wise:
            return step_rows(batch, input_batch.get("trajectory_ids"))
        return generator_output(batch, input_batch.get("trajectory_ids"))


def episode_requests(input_batch: GeneratorInput) -> list[EpisodeRequest]:
    """The batch's episodes as ctu's requests: each prompt with its row's ``env_extras`` read as a `TaskRow`, the
    sample index left to the rollout (a task's k-th trajectory in the batch is its sample k).

    Raises:
        KeyError: a row's extras name no domain or task id.
    """
    prompts = list(input_batch.get("prompts") or [])
    extras = list(input_batch.get("env_extras") or [{} for _ in prompts])
    return [EpisodeRequest(TaskRow.from_extras(extra or {}), prompt) for prompt, extra in zip(prompts, extras, strict=True)]


def generator_output(batch: RolloutBatch, trajectory_ids: Any = None) -> GeneratorOutput:
    """SkyRL's `GeneratorOutput` of a batch: token ids, loss masks, rewards and stop reasons per trajectory, the
    batch's metrics, and an ``env_metrics`` row each (`episode_row`). ``rollout_logprobs`` is None unless every
    trajectory has a logprob for each response token (`RolloutBatch.sampled_logprobs`: SkyRL takes all or none)."""
    records = batch.records
    return GeneratorOutput(
        prompt_token_ids=[r.prompt_ids for r in records],
        response_ids=[r.response_ids for r in records],
        rewards=[r.reward for r in records],
        loss_masks=[r.loss_mask for r in records],
        stop_reasons=[r.stop_reason for r in records],
        rollout_metrics=dict(batch.metrics),
        rollout_logprobs=batch.sampled_logprobs,
        trajectory_ids=trajectory_ids,
        trajectory_generation_times=[r.seconds for r in records],
        trajectory_time_splits=None,
        rollout_expert_indices=None,
        rollout_sample_support=None,
        is_last_step=None,
        env_metrics=[episode_row(r) for r in records],
        pixel_values=None,
        image_grid_thw=None,
    )


def step_rows(batch: RolloutBatch, trajectory_ids: Any = None) -> GeneratorOutput:
    """SkyRL's step-wise `GeneratorOutput` of a batch (`generator.step_wise_trajectories`): one row per training sample
    of each episode (`TrajectoryRecord.training_samples`: each policy turn of a step-wise training episode, the whole
    episode otherwise, e.g. in evaluation), an episode's rows consecutive, its last marked ``is_last_step``, each
    with the episode's trajectory id, reward, stop reason and ``env_metrics`` row. SkyRL computes each episode's
    advantage from its last row's reward and gives it to every row (`RayPPOTrainer.compute_advantages_and_returns`).
    Every row's sampler logprobs, or none (`RolloutBatch.sampled_logprobs`).

    Raises:
        ValueError: `trajectory_ids` does not give one id per episode.
    """
    from skyrl.train.generators.base import TrajectoryID

    records = batch.records
    ids = list(trajectory_ids) if trajectory_ids is not None else [TrajectoryID(f"{r.result.domain}/{r.result.task_id}", k)
                                                                   for k, r in enumerate(records)]
    if len(ids) != len(records):
        raise ValueError(f"{len(ids)} trajectory ids for {len(records)} episodes")
    whole_logprobs = batch.sampled_logprobs
    columns: dict[str, list[Any]] = {name: [] for name in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
                                                          "rollout_logprobs", "trajectory_ids", "is_last_step", "env_metrics",
                                                          "trajectory_generation_times")}
    complete = True
    for index, (record, trajectory) in enumerate(zip(records, ids, strict=True)):
        samples, row = record.training_samples(whole_logprobs=whole_logprobs[index] if whole_logprobs else []), episode_row(record)
        for position, (sample, _) in enumerate(samples):
            complete = complete and len(sample.logprobs) == len(sample.response_ids)
            columns["prompt_token_ids"].append(sample.prompt_ids)
            columns["response_ids"].append(sample.response_ids)
            columns["loss_masks"].append(sample.loss_mask)
            columns["rollout_logprobs"].append(sample.logprobs)
            columns["rewards"].append(record.reward)
            columns["stop_reasons"].append(record.stop_reason)
            columns["trajectory_ids"].append(trajectory)
            columns["is_last_step"].append(position == len(samples) - 1)
            columns["env_metrics"].append(row)
            columns["trajectory_generation_times"].append(record.seconds)
    return GeneratorOutput(
        prompt_token_ids=columns["prompt_token_ids"],
        response_ids=columns["response_ids"],
        rewards=columns["rewards"],
        loss_masks=columns["loss_masks"],
        stop_reasons=columns["stop_reasons"],
        rollout_metrics=dict(batch.metrics),
        rollout_logprobs=columns["rollout_logprobs"] if complete and columns["response_ids"] else None,
        trajectory_ids=columns["trajectory_ids"],
        trajectory_generation_times=columns["trajectory_generation_times"],
        trajectory_time_splits=None,
        rollout_expert_indices=None,
        rollout_sample_support=None,
        is_last_step=columns["is_last_step"],
        env_metrics=columns["env_metrics"],
        pixel_values=None,
        image_grid_thw=None,
    )


def episode_row(record: TrajectoryRecord) -> dict[str, object]:
    """The per-trajectory facts SkyRL carries with each trajectory (``env_metrics``): its eval dumps show them, and
    ctu's SkyRL trainers read ``infra_error`` there (`ctu.backends.skyrl.exclusion`)."""
    return {
        "domain": record.result.domain,
        "task_id": record.result.task_id,
        "test_set": record.extras.get("test_set"),
        "raw_reward": record.raw_reward,
        "reward": record.reward,
        "success": record.success,
        "termination": record.result.termination,
        "turns": record.result.turns,
        "infra_error": record.infra_error,
    }
