"""The SkyRL experiment ctu runs on Ray: `BasePPOExp` with ctu's generator, trackers and test-set metrics.

Imported only inside the launch (it imports ray, torch and skyrl's trainer).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import ray
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer

from ctu.components.trackers.builtin import Trackers, run_trackers
from ctu.registry import populate_registry
from ctu.rollout.sampling import SkyRLSampler
from ctu.rollout.setup import build_generator
from ctu.rollout.trajectories import TrajectoryLogger
from ctu.spec import Spec, spec_from_dict, spec_to_dict


class CtuTracking:
    """SkyRL's tracker interface over ctu's trackers: one step counter (the trainer's global step), an
    explicit finish, never a destructor."""

    backend = "ctu"
    """SkyRL reads it to decide on its own wandb sample tables (only for ``"wandb"``): ctu's trajectory log
    keeps the samples instead."""

    def __init__(self, trackers: Trackers) -> None:
        self.trackers = trackers

    def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
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
    and computing ``eval/all/<ctu metric>`` over every eval trajectory at once.

    SkyRL's evaluation combines the generator's per-batch metrics by their names (a mean of batch means for
    names with "avg" or "mean", the minimum for names containing "min", such as "termination", else the sum, so
    a success rate over two batches could read 1.25); ctu recomputes them from the trajectories instead.
    """

    async def eval(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        from ctu.rollout.generator import rollout_metrics
        from ctu.runners.tinker import evaluation_metrics

        self.generator.pop_eval_records()
        metrics = await super().eval(*args, **kwargs)
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
        self.run_dir = Path(run_dir)
        self.resume_step = resume_step
        super().__init__(cfg)

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name

        template = self.spec.model.chat_template.build()
        sampler = SkyRLSampler(inference_engine_client, resolve_policy_model_name(cfg), dict(template.template_kwargs))
        trajectories = self.spec.tracking.trajectories
        logger = TrajectoryLogger(self.run_dir, trajectories.every_n_steps, trajectories.train_samples, self.spec.experiment.seed)
        return build_generator(self.spec, tokenizer, sampler, on_records=logger)

    def get_tracker(self) -> CtuTracking:
        combined = run_trackers(self.spec.tracking.trackers)
        combined.start(self.run_dir, self.spec.experiment.name, self.spec.tracking.project, spec_to_dict(self.spec),
                       resume_step=self.resume_step)
        return CtuTracking(combined)

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator, colocate_pg):
        return CtuPPOTrainer(
            cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client, generator=generator, colocate_pg=colocate_pg,
        )


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: Any, spec_data: dict[str, Any], run_dir: str, resume_step: int | None = None) -> None:
    """Ray entrypoint: register ctu's components and environment in this worker, then run the experiment
    (resumed from `resume_step`'s checkpoint when given: trackers drop the lines of later steps first)."""
    from tau_bench_env.env import register_with_skyrl_gym

    populate_registry()
    register_with_skyrl_gym()
    spec = spec_from_dict(spec_data, source="resolved spec").spec
    CtuPPOExp(cfg, spec, Path(run_dir), resume_step).run()
