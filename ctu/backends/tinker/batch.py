"""What one step of the Tinker loop samples and trains on: the tasks of each step (`StepPlan`) and the
trajectories sampled over dynamic sampling's rounds (`SampledBatch`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctu.metrics import TIMING, TRAIN, metric
from ctu.rollout.records import rollout_metrics
from ctu.runners.grpo import groups_without_spread, shuffle_record_rewards

if TYPE_CHECKING:
    from ctu.rollout.records import RolloutBatch, TrajectoryRecord


@dataclass
class StepPlan[Row]:
    """Which training rows each step uses: per epoch, a seeded shuffle; `train_batch_size` rows a step. A row is a
    task (`TaskRow`, GRPO) or an SFT conversation (`ctu.sft.tokens.read_sft_rows`)."""

    rows: list[Row]
    batch_size: int
    epochs: int
    seed: int
    shuffle: bool
    max_steps: int | None

    @property
    def steps_per_epoch(self) -> int:
        return max(1, len(self.rows) // self.batch_size) if len(self.rows) >= self.batch_size else 1

    @property
    def total_steps(self) -> int:
        total = self.steps_per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps is not None else total

    def batch(self, step: int) -> list[Row]:
        """The rows of 1-based `step` (the same rows whenever it is asked: resumable)."""
        epoch, index = divmod(step - 1, self.steps_per_epoch)
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(self.seed * 7919 + epoch).shuffle(order)
        chosen = order[index * self.batch_size : (index + 1) * self.batch_size] or order[: self.batch_size]
        return [self.rows[i] for i in chosen]


@dataclass
class SampledBatch:
    """The trajectories sampled for one Tinker step, over one or more rounds of dynamic sampling.

    Attributes:
        records: the trajectories a step trains on (their ``reward`` the one each trains with: `rewards`).
        logprobs: each of `records`' sampler log-probabilities, one per response token (0.0 where the sampler gave
            none).
        sampled: every record sampled for the step, kept or dropped (the rollout metrics' episodes).
        rounds: batches sampled (``train/sampling_rounds``).
        dropped: groups without a reward spread seen (``train/zero_variance_groups``).
        generate_seconds: time in the generator, over every round.
        sampler_logprobs: whether every trajectory's logprobs are the sampler's (else some are the 0s put in).
        shuffled: ``train/shuffled_rewards`` of the last round, under ``algorithm.shuffle_rewards`` (else empty).
    """

    records: list[TrajectoryRecord] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    sampled: list[TrajectoryRecord] = field(default_factory=list)
    rounds: int = 0
    dropped: int = 0
    generate_seconds: float = 0.0
    sampler_logprobs: bool = True
    shuffled: dict[str, float] = field(default_factory=dict)

    def add(self, batch: RolloutBatch, shuffle_seed: str | None = None) -> None:
        """Append one `Rollout.run_batch` call's trajectories; their logprobs are 0 unless every one of the
        batch's trajectories has one for each response token (`RolloutBatch.sampled_logprobs`). With
        `shuffle_seed` (``algorithm.shuffle_rewards``), the trajectories train with their groups' rewards dealt out
        anew (`ctu.runners.grpo.shuffle_record_rewards`)."""
        records = batch.records
        if shuffle_seed is not None:
            self.shuffled.update(shuffle_record_rewards(records, shuffle_seed))
        logprobs = batch.sampled_logprobs or [[0.0] * len(r.response_ids) for r in records]
        self.sampler_logprobs = self.sampler_logprobs and batch.sampled_logprobs is not None
        self.logprobs += logprobs
        self.records += records
        self.sampled += records
        self.generate_seconds += batch.metrics.get(metric(TIMING, "generate"), 0.0)

    @property
    def rewards(self) -> list[float]:
        """The reward each of `records` trains with."""
        return [record.reward for record in self.records]

    def zero_variance(self, start: int, size: int) -> bool:
        """Whether the group of trajectories ``start .. start + size - 1`` has no reward spread."""
        rows = range(start, start + size)
        return bool(groups_without_spread([self.records[i].reward for i in rows], ["group"] * size,
                                         [self.records[i].infra_error is not None for i in rows]))

    def unspread(self, size: int) -> set[int]:
        """The trajectories (indices) of the groups of `size` without a reward spread (`zero_variance`), which
        ``algorithm.zero_variance_filter`` leaves out of the loss."""
        return {i for start in range(0, len(self.records), size) if self.zero_variance(start, size)
                for i in range(start, start + size)}

    def keep(self, rows: list[int]) -> SampledBatch:
        """Keep only the trajectories `rows` for training (the rollout metrics still count every one)."""
        self.logprobs = [self.logprobs[i] for i in rows]
        self.records = [self.records[i] for i in rows]
        return self

    @property
    def metrics(self) -> dict[str, float]:
        """Rollout metrics over every sampled episode, the generator's time and the filtering counts."""
        metrics = rollout_metrics(self.sampled)
        metrics[metric(TIMING, "generate")] = self.generate_seconds
        metrics[metric(TRAIN, "zero_variance_groups")] = float(self.dropped)
        metrics[metric(TRAIN, "sampling_rounds")] = float(self.rounds)
        metrics.update(self.shuffled)
        return metrics
