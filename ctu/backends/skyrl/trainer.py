"""ctu's SkyRL trainers: SkyRL's synchronous `RayPPOTrainer` and its `FullyAsyncRayPPOTrainer`, each with ctu's
test-set metrics and infrastructure errors kept out of training (`CtuTraining`).

Imported only inside the launch (it imports torch and skyrl's trainers).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
from skyrl.train.trainer import RayPPOTrainer

from ctu.backends.skyrl.checkpoints import SingleNodeCleanup
from ctu.backends.skyrl.exclusion import excluded_rows, infra_errors, kept_only, mark_excluded, neutral, zeroed
from ctu.backends.skyrl.exports import policy_export, untie_export_config
from ctu.metrics import TRAIN, evaluation_metrics, metric
from ctu.runners.grpo import groups_without_spread
from ctu.runners.rundir import RunDir

if TYPE_CHECKING:
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.fully_async_trainer import GeneratedOutputGroup
    from skyrl.train.generators.base import GeneratorOutput

    from ctu.backends.skyrl.generator import SkyRLGenerator
    from ctu.rollout.records import TrajectoryRecord

logger = logging.getLogger(__name__)

EXCLUDED_KEY = "ctu_infra_error"
"""The training batch's metadata entry with each trajectory's exclusion flag."""
SAMPLING_ROUNDS = metric(TRAIN, "sampling_rounds")
ZERO_VARIANCE_GROUPS = metric(TRAIN, "zero_variance_groups")
SKYRL_REWARD_FIGURES = ("reward/avg_raw_reward", "reward/mean_positive_reward")
"""SkyRL's reward figures of a training batch besides its pass@n (``reward/avg_pass_at_<n>``)."""


class CtuTraining(SingleNodeCleanup):
    """What ctu adds to a SkyRL trainer (a mixin before the SkyRL trainer class).

    **Evaluation**: ``test-<name>/average_reward``, ``success_rate`` and pass^k for each evaluation set, and
    ``eval/all/<ctu metric>`` over every eval trajectory at once. SkyRL combines the generator's per-batch metrics
    by their names (a mean of batch means for "avg"/"mean", the minimum for "min", such as "termination", else the
    sum, so a success rate over two batches could read 1.25); ctu recomputes them from the trajectories.

    **Infrastructure errors** (`ctu.backends.skyrl.exclusion`): a trajectory whose episode ended by one adds no
    spread to its group wherever SkyRL looks for one (dynamic sampling, zero-variance filtering, the async
    trainer's `sample_full_batch`), is left out of its group's mean and standard deviation, and gets advantage 0
    and loss mask 0; a group left with fewer than two gets advantages 0 (as `ctu.runners.grpo.group_advantages`
    gives on the Tinker backend). A step with more of them than `trainer.max_infra_error_rate` trains nothing
    (`train/skipped_steps`). SkyRL's reward figures of a step are over the kept trajectories, as ctu's are: one
    reward figure per step, whoever computed it.

    **Step-wise trajectories** (``rollout.trajectory: step_wise``; `ctu.backends.skyrl.generator.step_rows`): a row
    is a policy turn and its episode is counted once, at its last turn, wherever groups are counted.

    **Metrics**: ``train/zero_variance_groups``, the groups of the step without a reward spread (those dynamic
    sampling or `sample_full_batch` dropped, and those left in the batch, which `zero_variance_filter` masks), and
    ``train/sampling_rounds``, the batches dynamic sampling sampled for the step.

    **On-policy**: ``train/logprob_gap_mean``, ``_max``, ``_frac_over`` and ``_tokens``, the sampler's log-probability
    of each trained token against the trainer's forward pass before the update (`ctu.runners.grpo.logprob_gap`, as
    the tinker backend computes it), and a warning for a step past ``algorithm.logprob_gap.warn_mean``; SkyRL's own
    ``policy/rollout_train_logprobs_abs_diff_*`` stay beside them.

    **Exports**: a Hugging Face export's config says what it holds (`ctu.backends.skyrl.exports`: an export that
    carries an output projection of its own is marked untied; ctu keeps tied embeddings tied,
    `ctu.backends.skyrl.tied_embeddings`).
    """

    max_infra_error_rate: float = 0.5
    """Set by `CtuPPOExp` from the spec."""
    logprob_gap: tuple[float, float | None] | None = None
    """The spec's `algorithm.logprob_gap` as ``(token_threshold, warn_mean)``, set by `CtuPPOExp`; None: its defaults."""
    negative_advantage_weight: float = 1.0
    """The spec's `algorithm.negative_advantage_weight`, set by `CtuPPOExp`."""
    run_dir: RunDir | None = None
    """The run directory, set by `CtuPPOExp`: its ``state.json`` follows each completed checkpoint."""
    backend_name: str = "skyrl"
    """The spec's `backend.type` (the name this backend is registered under), set by `CtuPPOExp`; ``state.json``
    names it."""
    _skip_step: bool = False
    _infra_errors: list[str | None] = []
    _dropped_groups: int = 0
    _sampling_rounds: int = 0
    dynamic_sampling_state: dict[str, int] | None = None

    def save_models(self) -> None:
        """SkyRL's Hugging Face export, its config made to say what it holds (`untie_export_config`)."""
        super().save_models()  # type: ignore[misc]
        untie_export_config(policy_export(self.cfg.trainer.export_path, self.global_step))

    def handle_dynamic_sampling(self, generator_output: GeneratorOutput, uids: list[str]) -> tuple[GeneratorOutput, list[str], bool]:
        """SkyRL's dynamic sampling on a view where excluded trajectories add no spread; counts the rounds and the
        groups it drops or replaces. A `filter` batch without a group with a spread is sampled again here: SkyRL
        0.4.0 would slice it to nothing and fail (`slice_generator_output`'s "indices must be non-empty").

        Raises:
            RuntimeError: `max_sample_batches` batches gave too few groups with a spread.
        """
        view = neutral(generator_output, uids)
        flat = groups_without_spread(view["rewards"], uids, excluded_rows(view))
        self._sampling_rounds += 1
        self._dropped_groups += len(flat)  # dropped or replaced
        sampling = self.cfg.trainer.algorithm.dynamic_sampling
        if sampling.type != "filter" or len(flat) < len(set(uids)):
            output, kept_uids, keep_sampling = super().handle_dynamic_sampling(view, uids)  # type: ignore[misc]
            return output, kept_uids, keep_sampling
        state = self.dynamic_sampling_state = self.dynamic_sampling_state or {"sample_batch_count": 0}
        state["sample_batch_count"] += 1
        if 0 < sampling.max_sample_batches <= state["sample_batch_count"]:
            raise RuntimeError(f"{state['sample_batch_count']} batches sampled (algorithm.dynamic_sampling."
                               "max_sample_batches) without enough groups with a reward spread: the tasks are too easy "
                               "or too hard for the policy")
        return view, uids, True

    def _should_keep_group(self, group: GeneratedOutputGroup) -> bool:
        """The async trainer's `sample_full_batch` check, on a view where excluded trajectories add no spread."""
        uids = [group.uid] * len(group.generator_output["response_ids"])
        view = neutral(group.generator_output, uids)
        keep = not groups_without_spread(view["rewards"], uids, excluded_rows(view))
        if not keep:
            self._dropped_groups += 1
        return keep

    def postprocess_generator_output(self, generator_output: GeneratorOutput, uids: list[str], **kwargs: Any) -> tuple[GeneratorOutput, list[str]]:
        """SkyRL's post-processing with the loss masks of excluded trajectories zeroed (so SkyRL's zero-variance
        filter counts them as dead), and with `zero_variance_filter` those of every group without a spread (SkyRL
        keeps a group of one live trajectory, which has none); SkyRL's reward figures (``reward/avg_raw_reward``,
        pass@n, the mean positive reward) over the kept trajectories only, absent when none is kept (as ctu's
        own); logs the step's filtering metrics."""
        self._check_rollout_logprobs(generator_output)
        excluded = excluded_rows(generator_output)
        self._infra_errors = infra_errors(generator_output)
        flat = groups_without_spread(generator_output["rewards"], uids, excluded)
        masked = flat if self.cfg.trainer.algorithm.zero_variance_filter else set()
        masks = zeroed(generator_output["loss_masks"], [out or uid in masked for out, uid in zip(excluded, uids, strict=True)])
        measured, measured_uids = kept_only(kwargs.pop("metrics_generator_output", None) or generator_output,
                                            kwargs.pop("metrics_uids", None) or uids)
        if measured_uids:
            kwargs.update(metrics_generator_output=measured, metrics_uids=measured_uids)
        output, uids = super().postprocess_generator_output({**generator_output, "loss_masks": masks}, uids, **kwargs)  # type: ignore[misc]
        if not measured_uids:
            for name in [name for name in self.all_metrics if name in SKYRL_REWARD_FIGURES or name.startswith("reward/avg_pass_at_")]:
                del self.all_metrics[name]
        self.all_metrics[ZERO_VARIANCE_GROUPS] = float(self._dropped_groups + len(flat))
        self.all_metrics[SAMPLING_ROUNDS] = float(max(1, self._sampling_rounds))
        self._dropped_groups = self._sampling_rounds = 0
        return output, uids

    def _check_rollout_logprobs(self, generator_output: GeneratorOutput) -> None:
        """A loss that reads the sampler's logprobs (off-policy correction, `rollout_is`, `dppo`) gets them for every
        trajectory; ctu's SkyRL sampler always returns them, a generator of one's own might not.

        Raises:
            RuntimeError: the batch has no rollout logprobs.
        """
        algorithm = self.cfg.trainer.algorithm
        needs = algorithm.off_policy_correction.tis_ratio_type is not None or algorithm.policy_loss_type in ("rollout_is", "dppo")
        if needs and generator_output.get("rollout_logprobs") is None:
            raise RuntimeError("the loss reads the sampler's logprobs (backend.off_policy_correction or backend.policy_loss), "
                               "but the generator returned none for this batch: its sampler must return the logprob of "
                               "each sampled token")

    def convert_to_training_input(self, generator_output: GeneratorOutput, uids: list[str]) -> TrainingInputBatch:
        """SkyRL's training batch, with each trajectory's exclusion flag in its metadata (``EXCLUDED_KEY``; SkyRL's
        padding rows, after them, have none)."""
        batch = super().convert_to_training_input(generator_output, uids)  # type: ignore[misc]
        batch.metadata[EXCLUDED_KEY] = excluded_rows(generator_output)
        return batch

    def compute_advantages_and_returns(self, data: TrainingInputBatch) -> TrainingInputBatch:
        """SkyRL's advantages with each excluded trajectory in a group of its own (so out of its group's mean and
        standard deviation), then excluded trajectories and groups of fewer than two kept ones zeroed, and SkyRL's
        ``loss/avg_final_rewards`` over the kept trajectories (absent when none is); negative advantages weighed by
        ``algorithm.negative_advantage_weight`` (`ctu.runners.grpo.weigh_negative`); decides whether the step is
        skipped."""
        from ctu.runners.grpo import skip_step, weigh_negative

        uids = list(data.metadata["uids"])
        flags = list(data.metadata.pop(EXCLUDED_KEY))
        episodes = len(flags)
        excluded = flags + [False] * (len(uids) - episodes)
        ends = list(data.metadata.get("is_last_step") or [True] * episodes)[:episodes]  # step-wise: an episode's last row
        self._skip_step = skip_step([out for out, end in zip(flags, ends, strict=True) if end], self.max_infra_error_rate)
        data = self._group_advantages(data, uids, flags, excluded, ends) if any(excluded) else \
            super().compute_advantages_and_returns(data)  # type: ignore[misc]
        data["advantages"] = weigh_negative(data["advantages"], self.negative_advantage_weight)
        return data

    def _group_advantages(self, data: TrainingInputBatch, uids: list[str], flags: list[bool], excluded: list[bool],
                          ends: list[bool]) -> TrainingInputBatch:
        """SkyRL's advantages of a batch with excluded trajectories (see `compute_advantages_and_returns`); `ends`
        marks each row that ends its episode (every row, but with step-wise trajectories)."""
        import torch

        episodes = len(flags)
        data.metadata["uids"] = mark_excluded(uids, excluded)
        try:
            data = super().compute_advantages_and_returns(data)  # type: ignore[misc]
        finally:
            data.metadata["uids"] = uids
        # step-wise (`is_last_step`): rows are turns, and an episode is counted once, at its last turn
        kept = Counter(uid for uid, out, end in zip(uids[:episodes], flags, ends, strict=True) if not out and end)
        zero = torch.tensor([i < episodes and (excluded[i] or kept[uid] < 2) for i, uid in enumerate(uids)])
        data["advantages"][zero] = 0.0
        data["returns"][zero] = 0.0
        data["loss_mask"][torch.tensor(excluded)] = 0
        kept_rewards = data["rewards"][:episodes].sum(dim=-1)[torch.tensor([not out and end for out, end in zip(flags, ends, strict=True)])]
        if kept_rewards.numel():  # SkyRL's figure of the step's reward, over the kept trajectories as ctu's
            self.all_metrics["loss/avg_final_rewards"] = kept_rewards.mean().item()
        else:
            self.all_metrics.pop("loss/avg_final_rewards", None)
        valid = torch.masked_select(data["advantages"][:episodes], data["loss_mask"][:episodes].bool())
        self.all_metrics["loss/avg_raw_advantages"] = valid.mean().item() if valid.numel() else 0.0
        self.all_metrics["loss/avg_raw_advantages_abs"] = valid.abs().mean().item() if valid.numel() else 0.0
        return data

    def fwd_logprobs_values_reward(self, training_input: TrainingInputBatch) -> TrainingInputBatch:
        """SkyRL's forward passes before the update, then ctu's on-policy figures from the policy's (see the class
        docstring); none when SkyRL skipped the policy's forward pass (a loss against the sampler's logprobs) or the
        batch has no sampler logprobs."""
        from ctu.runners.grpo import step_logprob_gap
        from ctu.spec.models import LogprobGap

        training_input = super().fwd_logprobs_values_reward(training_input)  # type: ignore[misc]
        sampled, trained = training_input.get("rollout_logprobs", None), training_input.get("action_log_probs", None)
        if sampled is None or trained is None:
            return training_input
        mask = training_input["loss_mask"] > 0
        default = LogprobGap()
        threshold, warn_mean = self.logprob_gap or (default.token_threshold, default.warn_mean)
        self.all_metrics.update(step_logprob_gap(self.global_step, sampled[mask].float().tolist(), trained[mask].float().tolist(),
                                                 threshold, warn_mean))
        return training_input

    def train_critic_and_policy(self, data: TrainingInputBatch) -> dict[str, float]:
        """SkyRL's update, unless the step is skipped (`train/skipped_steps`)."""
        if not self._skip_step:
            self.all_metrics[metric(TRAIN, "skipped_steps")] = 0.0
            trained: dict[str, float] = super().train_critic_and_policy(data)  # type: ignore[misc]
            return trained
        from ctu.runners.grpo import skipped_step_message

        logger.warning(skipped_step_message(self.global_step, self._infra_errors, self.max_infra_error_rate))
        self.all_metrics[metric(TRAIN, "skipped_steps")] = 1.0
        return {}

    def save_checkpoints(self) -> str:
        """SkyRL's checkpoint, then the run's ``state.json`` naming its step (SkyRL marks a checkpoint complete in
        ``latest_ckpt_global_step.txt`` once every file of it is written): the state is true after any kill."""
        from ctu.backends.skyrl.checkpoints import latest_checkpoint_step

        folder: str = super().save_checkpoints()  # type: ignore[misc]
        if self.run_dir is not None:
            self.run_dir.write_state({"backend": self.backend_name, "step": latest_checkpoint_step(self.run_dir.path) or 0})
        return folder

    async def eval(self, *args: object, **kwargs: object) -> dict[str, float]:
        """SkyRL's evaluation plus ctu's metrics of every evaluation set."""
        from ctu.rollout.records import rollout_metrics

        self.generator.pop_eval_records()
        metrics: dict[str, float] = await super().eval(*args, **kwargs)  # type: ignore[misc]
        records = self.generator.pop_eval_records()
        metrics.update({f"eval/all/{name}": value for name, value in rollout_metrics(records).items()})
        groups: dict[str, list[TrajectoryRecord]] = defaultdict(list)
        for record in records:
            groups[str(record.extras.get("test_set") or record.extras.get("data_source"))].append(record)
        samples = self.cfg.generator.eval_n_samples_per_prompt
        for name, group in groups.items():
            metrics.update(evaluation_metrics(name, group, samples))
        return metrics

    # what the mixin reads of the SkyRL trainer it is mixed into
    cfg: SkyRLTrainConfig
    generator: SkyRLGenerator
    all_metrics: dict[str, float]
    global_step: int


class CtuPPOTrainer(CtuTraining, RayPPOTrainer):
    """SkyRL's synchronous trainer with `CtuTraining`, and a run whose dynamic sampling trains nothing made an error.

    SkyRL 0.4.0's loop drops the batches dynamic sampling gathered for a step when the training data's epoch ends
    before the step's batch is full, and starts the next epoch's step anew (`RayPPOTrainer.train`). When every
    step is cut off that way (too few tasks an epoch, or tasks whose groups rarely have a reward spread), SkyRL
    ends the run after its epochs having trained nothing, and its process exits 0; when only some steps are cut
    off, it ends short of `trainer.max_steps` without a word. Here each dropped partial batch is a warning, a run
    that ends short of its steps says so at its end, and a launch that sampled for training and trained no step
    raises.
    """

    _steps_done: int = 0
    """Steps this launch has completed (trained or skipped, `postprocess_generator_output`)."""
    _rounds_sampled: int = 0
    """Batches this launch sampled for training (dynamic sampling's rounds)."""
    _pending: tuple[int, int, int] | None = None
    """(epoch, step, rounds) of the step dynamic sampling is filling, None between steps."""

    def handle_dynamic_sampling(self, generator_output: GeneratorOutput, uids: list[str]) -> tuple[GeneratorOutput, list[str], bool]:
        """`CtuTraining`'s dynamic sampling, keeping count of the rounds of the step being filled; warns when the
        step before was cut off by its epoch's end (see the class docstring)."""
        self._warn_if_cut_off()
        self._rounds_sampled += 1
        output, kept_uids, keep_sampling = super().handle_dynamic_sampling(generator_output, uids)
        if keep_sampling:
            rounds = self._pending[2] if self._pending is not None else 0
            self._pending = (self._current_epoch, self.global_step, rounds + 1)
        else:
            self._pending = None
        return output, kept_uids, keep_sampling

    def postprocess_generator_output(self, generator_output: GeneratorOutput, uids: list[str], **kwargs: Any) -> tuple[GeneratorOutput, list[str]]:
        """`CtuTraining`'s post-processing, counting the completed step."""
        self._steps_done += 1
        return super().postprocess_generator_output(generator_output, uids, **kwargs)

    def _warn_if_cut_off(self) -> None:
        """Warn of the step whose gathered batches SkyRL dropped at its epoch's end (it clears its dynamic sampling
        state then), if there was one."""
        if self._pending is None or self.dynamic_sampling_state is not None:
            return
        epoch, step, rounds = self._pending
        self._pending = None
        logger.warning("epoch %d ended while dynamic sampling (algorithm.dynamic_sampling) was filling step %d's batch: "
                       "SkyRL dropped its %d sampled batch(es) and starts the step anew. With more tasks an epoch "
                       "(data.train) fewer samples are lost this way.", epoch, step, rounds)

    async def train(self) -> None:
        """SkyRL's training loop (see the class docstring).

        Raises:
            RuntimeError: the launch sampled batches for training and completed no step.
        """
        await super().train()
        self._warn_if_cut_off()
        if self._rounds_sampled and not self._steps_done:
            raise RuntimeError(
                f"the run sampled {self._rounds_sampled} batch(es) for training and trained no step: dynamic sampling "
                "(algorithm.dynamic_sampling) never filled a step's batch (trainer.train_batch_size groups with a reward "
                "spread) before an epoch of the training data ran out, and SkyRL drops a step's partial batch at its "
                "epoch's end. Give an epoch more tasks (data.train), or tasks nearer the policy's level.")
        if self._rounds_sampled and self.global_step < self.total_training_steps:
            logger.warning("the run ended at step %d of %d: its %d epoch(s) of training data (trainer.epochs) ran out "
                           "while dynamic sampling dropped the partial batches of steps cut off at an epoch's end (see "
                           "the warnings above). More epochs, or more tasks an epoch (data.train), train the rest.",
                           self.global_step, self.total_training_steps, self.cfg.trainer.epochs)


class CtuFullyAsyncTrainer(CtuTraining, FullyAsyncRayPPOTrainer):
    """SkyRL's fully async trainer (`backend.fully_async`) with `CtuTraining`; SkyRL logs each step's staleness
    (``async/staleness_mean``, ``_max``, ``_min``, ``_ratio``: steps between a trained group's start and its step).

    SkyRL 0.4.0's async loop saves a checkpoint and exports the policy once more after its last step, when its step
    counter has already moved one past it: a run stopped after step N would write ``global_step_<N+1>`` and resume
    as if N+1 steps had been trained. Those saves are made under the last trained step, and skipped when that step
    saved already.
    """

    _trained_step: int = 0

    def train_critic_and_policy(self, data: TrainingInputBatch) -> dict[str, float]:
        """`CtuTraining`'s update, remembering the step it trained."""
        self._trained_step = self.global_step
        return super().train_critic_and_policy(data)

    def save_checkpoints(self) -> str:
        """SkyRL's checkpoint, of the last trained step (see the class docstring)."""
        done = Path(self.cfg.trainer.ckpt_path) / "latest_ckpt_global_step.txt"
        return str(self._at_trained_step(super().save_checkpoints,
                                     done.exists() and done.read_text().strip() == str(self._trained_step),
                                     Path(self.cfg.trainer.ckpt_path) / f"global_step_{self._trained_step}"))

    def save_models(self) -> None:
        """SkyRL's Hugging Face export, of the last trained step (see the class docstring)."""
        folder = Path(self.cfg.trainer.export_path) / f"global_step_{self._trained_step}"
        self._at_trained_step(super().save_models, (folder / "policy").is_dir(), folder)

    def _at_trained_step(self, save: Callable[[], str | None], saved: bool, folder: Path) -> str | None:
        """`save()` as it is while the step counter is at a trained step; past it, `save()` with the counter at the
        last trained step, or nothing (`folder`) when that step is `saved` already."""
        step = self.global_step
        if not self._trained_step or step <= self._trained_step:
            return save()
        if saved:
            return str(folder)
        self.global_step = self._trained_step
        try:
            return save()
        finally:
            self.global_step = step
