"""The SkyRL experiment ctu runs on Ray: `BasePPOExp` with ctu's generator, trackers and test-set metrics.

Imported only inside the launch (it imports ray, torch and skyrl's trainer).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import ray
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer

from ctu.components.trackers.combined import Trackers
from ctu.composition import build_components
from ctu.metrics import TRAIN, evaluation_metrics, metric
from ctu.registry import populate_registry
from ctu.rollout.build import build_generator
from ctu.rollout.trajectories import TrajectoryLogger
from ctu.runners.skyrl.sampler import SkyRLSampler
from ctu.spec import Spec, spec_from_dict, spec_to_dict

logger = logging.getLogger(__name__)


class CtuTracking:
    """SkyRL's tracker interface over ctu's trackers: one step counter (the trainer's global step), an
    explicit finish, never a destructor."""

    backend = "ctu"
    """SkyRL reads it to decide on its own wandb sample tables (only for ``"wandb"``): ctu's trajectory log
    keeps the samples instead."""

    def __init__(self, trackers: Trackers) -> None:
        self.trackers = trackers

    def log(self, data: dict[str, object], step: int, commit: bool = False) -> None:
        """Log the numeric entries of `data` at `step`."""
        numbers = {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.trackers.log(numbers, step)

    def finish(self) -> None:
        """Finish every tracker."""
        self.trackers.finish()

    def log_exception(self, error: BaseException, step: int = 0) -> None:
        """Nothing beyond SkyRL's own logging; the trackers keep numbers only."""

    def log_samples_to_table(self, *args: Any, **kwargs: Any) -> None:
        """Trajectories go to ctu's JSONL logs instead."""


class CtuPPOTrainer(RayPPOTrainer):
    """SkyRL's trainer, adding ``test-<name>/average_reward``, ``success_rate`` and pass^k to each evaluation,
    computing ``eval/all/<ctu metric>`` over every eval trajectory at once, and keeping infrastructure errors
    out of training.

    SkyRL's evaluation combines the generator's per-batch metrics by their names (a mean of batch means for
    names with "avg" or "mean", the minimum for names containing "min", such as "termination", else the sum, so
    a success rate over two batches could read 1.25); ctu recomputes them from the trajectories instead.

    A training episode that ended by an infrastructure error (`TrajectoryRecord.infra_error`) gets advantage 0,
    is left out of its group's mean and standard deviation and gets loss mask 0; a group left with fewer than
    two episodes gets advantages 0 (as `ctu.runners.grpo.group_advantages` gives on the Tinker backend). A step
    with more of them than `trainer.max_infra_error_rate` trains nothing (`train/skipped_steps`).
    """

    max_infra_error_rate: float = 0.5
    """Set by `CtuPPOExp` from the spec."""
    _skip_step: bool = False

    def _excluded(self, rows: int) -> list[bool]:
        """One flag per row of the training batch: the episode ended by an infrastructure error. The generator's
        last batch is the one being trained on, in the same order; padding rows SkyRL appends are never
        excluded."""
        records = self.generator.last_records
        if len(records) > rows:
            raise RuntimeError(f"the generator's last batch has {len(records)} episodes, the training batch {rows} rows")
        return [record.infra_error is not None for record in records] + [False] * (rows - len(records))

    def compute_advantages_and_returns(self, data: Any) -> Any:
        import torch

        from ctu.runners.grpo import skip_step

        uids = list(data.metadata["uids"])
        excluded = self._excluded(len(uids))
        episodes = len(self.generator.last_records)
        self._skip_step = skip_step(excluded[:episodes], self.max_infra_error_rate)
        if not any(excluded):
            return super().compute_advantages_and_returns(data)
        data.metadata["uids"] = [f"{uid}/infra-error" if out else uid for uid, out in zip(uids, excluded)]
        try:
            data = super().compute_advantages_and_returns(data)
        finally:
            data.metadata["uids"] = uids
        kept = Counter(uid for uid, out in zip(uids[:episodes], excluded) if not out)
        zero = torch.tensor([i < episodes and (excluded[i] or kept[uid] < 2) for i, uid in enumerate(uids)])
        data["advantages"][zero] = 0.0
        data["returns"][zero] = 0.0
        data["loss_mask"][torch.tensor(excluded)] = 0
        valid = torch.masked_select(data["advantages"][:episodes], data["loss_mask"][:episodes].bool())
        self.all_metrics["loss/avg_raw_advantages"] = valid.mean().item() if valid.numel() else 0.0
        self.all_metrics["loss/avg_raw_advantages_abs"] = valid.abs().mean().item() if valid.numel() else 0.0
        return data

    def train_critic_and_policy(self, data: Any) -> dict[str, float]:
        if not self._skip_step:
            self.all_metrics[metric(TRAIN, "skipped_steps")] = 0.0
            trained: dict[str, float] = super().train_critic_and_policy(data)
            return trained
        from ctu.runners.grpo import skipped_step_message

        logger.warning(skipped_step_message(self.global_step, [r.infra_error for r in self.generator.last_records],
                                            self.max_infra_error_rate))
        self.all_metrics[metric(TRAIN, "skipped_steps")] = 1.0
        return {}

    async def eval(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        from ctu.rollout.records import rollout_metrics

        self.generator.pop_eval_records()
        metrics: dict[str, float] = await super().eval(*args, **kwargs)
        records = self.generator.pop_eval_records()
        metrics.update({f"eval/all/{name}": value for name, value in rollout_metrics(records).items()})
        groups: dict[str, list[Any]] = defaultdict(list)
        for record in records:
            groups[str(record.extras.get("test_set") or record.extras.get("data_source"))].append(record)
        samples = self.cfg.generator.eval_n_samples_per_prompt
        for name, group in groups.items():
            metrics.update(evaluation_metrics(name, group, samples))
        return metrics


class CtuPPOExp(BasePPOExp):
    """`BasePPOExp` whose hooks return ctu's generator and trackers, and `CtuPPOTrainer`."""

    def __init__(self, cfg: Any, spec: Spec, run_dir: Path, resume_step: int | None = None) -> None:
        self.spec = spec
        self.components = build_components(spec)
        self.run_dir = Path(run_dir)
        self.resume_step = resume_step
        super().__init__(cfg)

    def get_inference_client(self) -> Any:
        """SkyRL's client, its vLLM servers and router started; the router (a `multiprocessing` child of this
        process, which would outlive it if it were killed) gets a watchdog (`ctu.runners.watchdog`)."""
        from ctu.runners.watchdog import watch

        client = super().get_inference_client()
        process = getattr(getattr(self, "_inference_router", None), "_process", None)
        if process is not None and process.pid is not None:
            watch(process.pid, group=False)
        return client

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name

        sampler = SkyRLSampler(inference_engine_client, resolve_policy_model_name(cfg))
        trajectories = self.spec.tracking.trajectories
        logger = TrajectoryLogger(self.run_dir, trajectories.every_n_steps, trajectories.train_samples, self.spec.experiment.seed)
        return build_generator(self.components, tokenizer, sampler, on_records=logger)

    def get_tracker(self) -> CtuTracking:
        combined = self.components.trackers
        combined.start(self.run_dir, self.spec.experiment.name, self.components.project, spec_to_dict(self.spec),
                       resume_step=self.resume_step)
        return CtuTracking(combined)

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator, colocate_pg):
        trainer = CtuPPOTrainer(
            cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client, generator=generator, colocate_pg=colocate_pg,
        )
        trainer.max_infra_error_rate = self.spec.trainer.max_infra_error_rate
        return trainer


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: Any, spec_data: dict[str, object], run_dir: str, resume_step: int | None = None) -> None:
    """Ray entrypoint: register ctu's components and environment in this worker, then run the experiment
    (resumed from `resume_step`'s checkpoint when given: trackers drop the lines of later steps first)."""
    from tau_bench_env.env import register_with_skyrl_gym

    populate_registry()
    register_with_skyrl_gym()
    spec = spec_from_dict(spec_data, source="resolved spec").spec
    CtuPPOExp(cfg, spec, Path(run_dir), resume_step).run()
