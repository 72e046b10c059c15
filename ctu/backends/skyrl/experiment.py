"""The SkyRL experiment ctu runs on Ray: `BasePPOExp` with ctu's generator, trackers and trainer
(`ctu.backends.skyrl.trainer`).

Imported only inside the launch (it imports ray, torch and skyrl's trainer).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from skyrl.train.entrypoints.main_base import BasePPOExp

from ctu.backends.skyrl.generator import SkyRLGenerator
from ctu.backends.skyrl.sampler import SkyRLSampler
from ctu.backends.skyrl.worker import worker_settings
from ctu.components.trackers.combined import Trackers
from ctu.composition import build_components
from ctu.rollout.build import build_generator
from ctu.rollout.trajectories import TrajectoryLogger
from ctu.runners.console import route_library_logs
from ctu.runners.rundir import RunDir
from ctu.spec import Spec, spec_from_dict, spec_to_dict

if TYPE_CHECKING:
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.dataset import PromptDataset

    from ctu.components.chat_templates.base import Tokenizer

logger = logging.getLogger(__name__)

IN_PROCESS_FILTER_ROWS = 2000
"""Datasets of at most this many rows are filtered for prompt length in the entrypoint's own process. SkyRL's
`PromptDataset` spawns 8 processes for it whatever the size, each importing transformers and unpickling the
tokenizer: 17 s of a launch here for two datasets of tau2 tasks, where 500 rows take 1.3 s in process."""


def filter_workers(paths: list[str]) -> int:
    """Processes for SkyRL's prompt-length filter over the parquet files `paths`: 1 (in process) up to
    `IN_PROCESS_FILTER_ROWS` rows in all, else SkyRL's own 8."""
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(path).metadata.num_rows for path in paths)
    return 1 if rows <= IN_PROCESS_FILTER_ROWS else 8


class CtuTracking:
    """SkyRL's tracker interface over ctu's trackers: one step counter (the trainer's global step), wandb's commit
    semantics (the entries of calls with ``commit=False`` join the next committed line of the same step: SkyRL's
    async loop logs a step's metrics and then its timings), an explicit finish, never a destructor."""

    backend = "ctu"
    """SkyRL reads it to decide on its own wandb sample tables (only for ``"wandb"``): ctu's trajectory log
    keeps the samples instead."""

    def __init__(self, trackers: Trackers) -> None:
        self.trackers = trackers
        self._pending: dict[str, float] = {}
        self._pending_step: int | None = None

    def log(self, data: dict[str, object], step: int, commit: bool = False) -> None:
        """Log the numeric entries of `data` at `step`, once committed (or when another step is logged)."""
        if self._pending_step is not None and step != self._pending_step:
            self._flush()
        self._pending.update({k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self._pending_step = step
        if commit:
            self._flush()

    def _flush(self) -> None:
        if self._pending_step is not None and self._pending:
            self.trackers.log(self._pending, self._pending_step)
        self._pending, self._pending_step = {}, None

    def finish(self) -> None:
        """Log what is pending, then finish every tracker."""
        self._flush()
        self.trackers.finish()

    def log_exception(self, error: BaseException, step: int = 0) -> None:
        """Log what is pending; beyond that, SkyRL's own logging (the trackers keep numbers only)."""
        self._flush()

    def log_samples_to_table(self, *args: object, **kwargs: object) -> None:
        """Trajectories go to ctu's JSONL logs instead."""


class CtuPPOExp(BasePPOExp):
    """`BasePPOExp` whose hooks return ctu's generator and trackers, ctu's trainer (`CtuFullyAsyncTrainer` with
    `backend.fully_async`, else `CtuPPOTrainer`), and SkyRL's datasets filtered in process when small."""

    def __init__(self, cfg: SkyRLTrainConfig, spec: Spec, run_dir: Path, resume_step: int | None = None,
                 log_file: Path | None = None, verbose: bool = False) -> None:
        self.spec = spec
        self.settings = worker_settings(spec)  # what this worker reads of the spec itself
        self.components = build_components(spec)
        self.run_dir = Path(run_dir)
        self.resume_step = resume_step
        self.log_file, self.verbose = log_file, verbose
        self._route_logs()
        super().__init__(cfg)

    def _route_logs(self) -> None:
        """SkyRL's and the libraries' logs to `log_file`, ctu's on the console (`ctu.runners.console`); nothing
        without a log file."""
        if self.log_file is not None:
            route_library_logs(self.log_file, self.verbose)

    def get_cfg_as_str(self, cfg: SkyRLTrainConfig) -> str:
        """SkyRL logs its whole config at start (~500 lines): it is written to ``skyrl_config.yaml`` in the run
        directory instead, and the log says where."""
        path = self.run_dir / "skyrl_config.yaml"
        path.write_text(super().get_cfg_as_str(cfg), encoding="utf-8")
        return f"SkyRL's config: {path}"

    def _prompt_dataset(self, paths: list[str]) -> PromptDataset:
        from skyrl.train.dataset import PromptDataset

        return PromptDataset(datasets=paths, tokenizer=self.tokenizer, max_prompt_length=self.cfg.trainer.max_prompt_length,
                             num_workers=filter_workers(paths))

    def get_train_dataset(self) -> PromptDataset:
        """SkyRL's training `PromptDataset`, filtered in process when small (`filter_workers`).

        Raises:
            ValueError: the dataset holds fewer rows than one training batch.
        """
        dataset = self._prompt_dataset(list(self.cfg.data.train_data))
        if len(dataset) < self.cfg.trainer.train_batch_size:
            raise ValueError(f"the training data holds {len(dataset)} prompts, fewer than one batch "
                             f"(trainer.train_batch_size: {self.cfg.trainer.train_batch_size})")
        return dataset

    def get_eval_dataset(self) -> PromptDataset | None:
        """SkyRL's evaluation `PromptDataset` as `get_train_dataset` builds it, or None when SkyRL evaluates nothing."""
        if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
            return self._prompt_dataset(list(self.cfg.data.val_data))
        return None

    def get_inference_client(self) -> RemoteInferenceClient:
        """SkyRL's client, its vLLM servers and router started; the router (a `multiprocessing` child of this
        process, which would outlive it if it were killed) gets a watchdog (`ctu.runners.watchdog`); the session
        the start-up left on an ended event loop is released (`release_ended_loop_sessions`)."""
        from ctu.backends.skyrl.generate_client import release_ended_loop_sessions
        from ctu.runners.watchdog import watch

        client = super().get_inference_client()
        release_ended_loop_sessions(client)
        process = getattr(getattr(self, "_inference_router", None), "_process", None)
        if process is not None and process.pid is not None:
            watch(process.pid, group=False)
        return client

    def get_generator(self, cfg: SkyRLTrainConfig, tokenizer: Tokenizer, inference_engine_client: RemoteInferenceClient) -> SkyRLGenerator:
        from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name

        sampler = SkyRLSampler(inference_engine_client, resolve_policy_model_name(cfg), cache_salt=bool(cfg.generator.use_cache_salt))
        own = self.settings
        logger = TrajectoryLogger(self.run_dir, own.trajectory_every_n_steps, own.trajectory_train_samples, own.trajectory_seed)
        return SkyRLGenerator(build_generator(self.components, tokenizer, sampler, on_records=logger),
                              step_wise=own.step_wise, shuffle_rewards_seed=own.shuffle_rewards_seed)

    def get_tracker(self) -> CtuTracking:
        combined = self.components.trackers
        combined.start(self.run_dir, self.settings.run_name, self.components.project, spec_to_dict(self.spec),
                       resume_step=self.resume_step, tags=self.settings.tags)
        return CtuTracking(combined)

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator, colocate_pg):
        from ctu.backends.skyrl.trainer import CtuFullyAsyncTrainer, CtuPPOTrainer

        kind = CtuFullyAsyncTrainer if cfg.trainer.fully_async.enabled else CtuPPOTrainer
        trainer = kind(
            cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client, generator=generator, colocate_pg=colocate_pg,
        )
        own = self.settings
        trainer.max_infra_error_rate = own.max_infra_error_rate
        trainer.logprob_gap = (own.logprob_gap_threshold, own.logprob_gap_warn_mean)
        trainer.negative_advantage_weight = own.negative_advantage_weight
        trainer.run_dir = RunDir(self.run_dir)
        trainer.backend_name = own.backend_name
        self._route_logs()  # SkyRL's trainer set its console sink up again
        return trainer


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: SkyRLTrainConfig, spec_data: dict[str, object], run_dir: str, resume_step: int | None = None,
                     secrets: dict[str, str] | None = None, log_file: str | None = None, verbose: bool = False) -> None:
    """Ray entrypoint: register ctu's components and environment in this worker, then run the experiment
    (resumed from `resume_step`'s checkpoint when given: trackers drop the lines of later steps first), SkyRL's
    and the libraries' logs going to `log_file` (and the console too when `verbose`), ctu's to the console.

    `secrets` are the values of the variables the spec names (`ctu.spec.secrets.secret_values`, read where `ctu run`
    started), set in this process's environment first: this process and the rollout workers it starts call the user
    simulator's and judges' endpoints, and a worker that `ray start` launched has the node's environment, not the
    driver's. The endpoints are then probed from here, with those keys (`ctu.backends.skyrl.preflight.endpoint_problems`).

    Raises:
        PreflightError: an endpoint does not answer from this node, or refuses the key.
    """
    import os
    import socket

    from ctu.backends.skyrl.gym_env import register_with_skyrl_gym
    from ctu.backends.skyrl.preflight import endpoint_problems, raise_problems

    os.environ.update(secrets or {})
    register_with_skyrl_gym()
    spec = spec_from_dict(spec_data, source="resolved spec").spec
    raise_problems(f"the Ray worker that runs the rollouts ({socket.gethostname()})", endpoint_problems(spec))
    CtuPPOExp(cfg, spec, Path(run_dir), resume_step, Path(log_file) if log_file else None, verbose).run()
