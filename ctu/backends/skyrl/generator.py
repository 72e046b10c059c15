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

logger = logging.getLogger(__name__)


class SkyRLGenerator(GeneratorInterface):
    """SkyRL's generator over a ctu `Rollout` (see the module docstring).

    Attributes:
        rollout: the rollout every batch runs through.
    """

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout
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
