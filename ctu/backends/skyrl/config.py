"""The `skyrl` backend: the spec resolved into SkyRL's own config, validated by SkyRL, launched on Ray.

Resolution happens once, on the driver, at one boundary (`skyrl_overrides`), and SkyRL's `validate_cfg`
runs on the result. The launch initialises Ray and runs `CtuPPOExp` in a remote entrypoint; the entrypoint
registers the environment with skyrl-gym there (`ctu.backends.skyrl.gym_env`), since registries filled by imports on the driver are empty in Ray
workers (ctu's own registry fills itself from the entry points at its first lookup, there as anywhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctu.backends.skyrl.params import SkyRLParams
from ctu.composition import Components, build_components
from ctu.runners.rundir import RunDir, RunState
from ctu.spec import Spec
from ctu.spec.model_family import NATIVE_TOOL_PARSERS, model_family

NEVER = 2**31 - 1
"""A SkyRL interval no run reaches. SkyRL reads an interval of 0 as "off": no checkpoint at all, and no eval set
(so no eval before training either). ctu's 0 means "only at epoch ends / the last step", which SkyRL does for
any positive interval (it saves at each epoch's end and evaluates after the last step)."""


def skyrl_overrides(components: Components, backend: SkyRLParams, data_dir: Path, run_dir: Path,
                    resume: bool = False) -> dict[str, object]:
    """SkyRL config overrides (dotted keys) for the spec of `components` (its chat template gives SkyRL's
    `chat_template_kwargs`) on the `skyrl` backend `backend` (its params, as the backend was built with them);
    `data_dir` holds the prepared parquet files.

    SkyRL resumes from the latest checkpoint in ``trainer.ckpt_path`` by default; ctu resumes only when asked
    (`resume`, from ``ctu run --resume``), and then does not evaluate again before the first resumed step (the
    run evaluated at its last step already: a second evaluation would log that step twice).

    Every path is absolute: Ray's uv hook runs workers in a copy of the working directory that leaves out
    git-ignored folders such as ``runs/``, so a relative path would find no dataset there and write checkpoints
    into a throw-away copy. A ``builtin:`` model is named by its cache folder (`ctu run` builds it first).

    Raises:
        ValueError: an unknown ``builtin:`` model.
    """
    spec = components.spec
    data_dir, run_dir = Path(data_dir).absolute(), Path(run_dir).absolute()
    return {
        "data.train_data": [str(data_dir / "train.parquet")],
        "data.val_data": [str(data_dir / f"test_{name}.parquet") for name in spec.data.evaluation_sets()],
        "environment.env_class": "tau_bench",
        **_models_and_placement(spec, backend),
        **_run_and_schedule(spec, run_dir, resume),
        **_algorithm(spec),
        **_filtering_and_async(spec),
        **_generator(spec, components.chat_template.template_kwargs),
        **_inference_engine(spec, backend),
        **backend.skyrl_overrides,
    }


def _models_and_placement(spec: Spec, backend: SkyRLParams) -> dict[str, object]:
    """The policy and reference models (a ``builtin:`` one by its cache folder), their offload, and where they run."""
    from ctu.models.tiny_qwen3 import local_path

    return {
        "trainer.policy.model.path": local_path(spec.model.path),
        "trainer.ref.model.path": local_path(spec.model.reference_path or spec.model.path),
        "trainer.policy.fsdp_config.cpu_offload": backend.policy_cpu_offload,
        "trainer.ref.fsdp_config.cpu_offload": backend.ref_cpu_offload,
        "trainer.strategy": backend.strategy,
        "trainer.placement.colocate_all": backend.colocate_all,
        "trainer.placement.policy_num_nodes": backend.num_nodes,
        "trainer.placement.policy_num_gpus_per_node": backend.num_gpus_per_node,
        "trainer.placement.ref_num_nodes": backend.num_nodes,
        "trainer.placement.ref_num_gpus_per_node": backend.num_gpus_per_node,
        "trainer.gradient_checkpointing": backend.gradient_checkpointing,
    }


def _run_and_schedule(spec: Spec, run_dir: Path, resume: bool) -> dict[str, object]:
    """The run's name and folders, its batches, and when it evaluates, saves, exports and resumes."""
    trainer = spec.trainer
    return {
        "trainer.seed": spec.experiment.seed,
        "trainer.project_name": spec.tracking.project,
        "trainer.run_name": spec.experiment.name,
        "trainer.tags": list(spec.experiment.tags),
        "trainer.logger": "console",
        "trainer.ckpt_path": str(RunDir(run_dir).checkpoints),
        "trainer.export_path": str(RunDir(run_dir).exports),
        "trainer.log_path": str(run_dir / "logs"),
        "trainer.epochs": trainer.epochs,
        "trainer.max_training_steps": trainer.max_steps,
        "trainer.train_batch_size": trainer.train_batch_size,
        "trainer.policy_mini_batch_size": trainer.policy_mini_batch_size,
        "trainer.micro_train_batch_size_per_gpu": trainer.micro_train_batch_size_per_gpu,
        "trainer.micro_forward_batch_size_per_gpu": trainer.micro_train_batch_size_per_gpu,
        "trainer.eval_batch_size": trainer.eval_batch_size,
        # no evaluation set: SkyRL's 0 (it would otherwise evaluate with no dataloader)
        "trainer.eval_interval": (trainer.eval_interval or NEVER) if spec.data.evaluation_sets() else 0,
        "trainer.eval_before_train": trainer.eval_before_train and not resume and bool(spec.data.evaluation_sets()),
        "trainer.resume_mode": "latest" if resume else "none",
        "trainer.ckpt_interval": trainer.ckpt_interval or NEVER,
        "trainer.max_ckpts_to_keep": trainer.max_ckpts_to_keep,
        "trainer.hf_save_interval": trainer.hf_save_interval or NEVER,  # > 0: SkyRL exports after the last step
        "trainer.max_prompt_length": spec.model.max_model_len,
    }


def _algorithm(spec: Spec) -> dict[str, object]:
    """The loss (advantages, clipping, KL and entropy terms) and the optimizer."""
    algorithm, optimizer = spec.algorithm, spec.trainer.optimizer
    return {
        "trainer.algorithm.advantage_estimator": algorithm.advantage_estimator,
        "trainer.algorithm.grpo_norm_by_std": algorithm.norm_adv_by_std,
        "trainer.algorithm.eps_clip_low": algorithm.eps_clip_low,
        "trainer.algorithm.eps_clip_high": algorithm.eps_clip_high,
        "trainer.algorithm.value_clip": algorithm.value_clip,
        "trainer.algorithm.use_kl_loss": algorithm.use_kl_loss,
        "trainer.algorithm.kl_loss_coef": algorithm.kl_loss_coef,
        "trainer.algorithm.kl_estimator_type": algorithm.kl_estimator,
        "trainer.algorithm.use_entropy_loss": algorithm.entropy_coef > 0,
        "trainer.algorithm.entropy_loss_coef": algorithm.entropy_coef,
        "trainer.algorithm.loss_reduction": algorithm.loss_reduction,
        "trainer.algorithm.policy_loss_type": algorithm.policy_loss,
        "trainer.policy.optimizer_config.lr": optimizer.lr,
        "trainer.policy.optimizer_config.weight_decay": optimizer.weight_decay,
        "trainer.policy.optimizer_config.max_grad_norm": optimizer.max_grad_norm,
        "trainer.policy.optimizer_config.num_warmup_steps": optimizer.warmup_steps,
    }


def _filtering_and_async(spec: Spec) -> dict[str, object]:
    """Zero-variance filtering, dynamic sampling, off-policy correction and fully async training. Under
    `trainer.fully_async`, dynamic sampling's `filter` is SkyRL's async form of it, ``sample_full_batch`` (its
    synchronous ``dynamic_sampling`` is refused there). Whenever a loss reads the sampler's logprobs,
    ``generator.sampling_params.logprobs`` says so (SkyRL's check); ctu's sampler returns them always."""
    algorithm, fully_async = spec.algorithm, spec.trainer.fully_async
    sampling, correction = algorithm.dynamic_sampling, algorithm.off_policy_correction
    overrides: dict[str, object] = {
        "trainer.algorithm.zero_variance_filter": algorithm.zero_variance_filter or (fully_async is not None and sampling is not None),
        "trainer.algorithm.dynamic_sampling.type": sampling.type if sampling is not None and fully_async is None else None,
        "trainer.fully_async.enabled": fully_async is not None,
    }
    if sampling is not None:
        overrides["trainer.algorithm.dynamic_sampling.max_sample_batches"] = sampling.max_sample_batches
        overrides["trainer.algorithm.dynamic_sampling.min_replace_ratio"] = sampling.min_replace_ratio
    if correction is not None:
        overrides["trainer.algorithm.off_policy_correction.tis_ratio_type"] = correction.tis_ratio_type
        overrides["trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high"] = correction.token_tis_ratio_clip_high
        overrides["trainer.algorithm.off_policy_correction.sequence_tis_ratio_clip_high"] = correction.sequence_tis_ratio_clip_high
    if correction is not None or algorithm.policy_loss != "regular":
        overrides["generator.sampling_params.logprobs"] = 0
    if fully_async is not None:
        batch = spec.trainer.policy_mini_batch_size
        overrides.update({
            "trainer.fully_async.max_staleness_steps": fully_async.max_staleness_steps,
            "trainer.fully_async.num_parallel_generation_workers":
                fully_async.num_parallel_generation_workers or batch * (fully_async.max_staleness_steps + 1),
            "trainer.fully_async.sample_full_batch": sampling is not None,
        })
    return overrides


def _generator(spec: Spec, template_kwargs: Mapping[str, object]) -> dict[str, object]:
    """Samples per prompt, turns and lengths, and the sampling parameters of training and evaluation."""
    rollout = spec.rollout
    return {
        "generator.n_samples_per_prompt": rollout.n_samples_per_prompt,
        "generator.eval_n_samples_per_prompt": rollout.eval_n_samples_per_prompt,
        "generator.max_turns": spec.environment.max_turns,
        "generator.max_input_length": spec.model.max_model_len,
        "generator.zero_reward_on_non_stop": False,
        "generator.use_conversation_multi_turn": True,
        "generator.batched": False,
        "generator.chat_template_kwargs": dict(template_kwargs),
        "generator.sampling_params.temperature": rollout.temperature,
        "generator.sampling_params.top_p": rollout.top_p,
        "generator.sampling_params.repetition_penalty": rollout.repetition_penalty,
        "generator.sampling_params.additional_kwargs": {"frequency_penalty": rollout.frequency_penalty,
                                                        "presence_penalty": rollout.presence_penalty},
        "generator.sampling_params.max_generate_length": rollout.max_tokens_per_turn,
        "generator.eval_sampling_params.temperature": rollout.eval_temperature,
        "generator.eval_sampling_params.max_generate_length": rollout.max_tokens_per_turn,
    }


def _inference_engine(spec: Spec, backend: SkyRLParams) -> dict[str, object]:
    """SkyRL's vLLM engines: how many, their size, and vLLM's own settings (keys set one by one under
    ``engine_init_kwargs``, so `backend.skyrl_overrides` may add more)."""
    engine = "generator.inference_engine.engine_init_kwargs"
    overrides: dict[str, object] = {
        "generator.inference_engine.backend": "vllm",
        "generator.inference_engine.num_engines": backend.num_inference_engines,
        "generator.inference_engine.tensor_parallel_size": backend.inference_engine_tensor_parallel_size,
        "generator.inference_engine.gpu_memory_utilization": backend.gpu_memory_utilization,
        # vLLM reports raw logprobs by default (of the logits before temperature) while SkyRL's trainer divides the
        # logits by the temperature: processed logprobs are of the distribution sampled from (temperature, then
        # top_p/top_k renormalised), so rollout and trainer logprobs agree up to the nucleus' mass (< -log top_p).
        f"{engine}.logprobs_mode": "processed_logprobs",
    }
    if spec.rollout.native_tool_calling:
        overrides[f"{engine}.enable_auto_tool_choice"] = True
        overrides[f"{engine}.tool_call_parser"] = NATIVE_TOOL_PARSERS[model_family(spec)]
    return overrides


def resolve_skyrl_config(spec: Spec, backend: SkyRLParams, data_dir: Path, run_dir: Path, resume: bool = False,
                         components: Components | None = None) -> Any:
    """SkyRL's `SkyRLTrainConfig` for `spec` on the backend `backend` (`skyrl_overrides`), checked by SkyRL's own `validate_cfg` (imports skyrl, torch);
    `components` are the spec's, when the caller has built them already (else built here).

    Raises:
        ValueError, AssertionError: SkyRL rejects the config (the message is SkyRL's).
    """
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils import validate_cfg

    built = components if components is not None else build_components(spec)
    config = SkyRLTrainConfig.from_cli_overrides(skyrl_overrides(built, backend, data_dir, run_dir, resume))
    validate_cfg(config)
    return config


def config_yaml(config: Any) -> str:
    """SkyRL's config as YAML (SkyRL's own rendering)."""
    from skyrl.train.config import get_config_as_yaml_str

    return str(get_config_as_yaml_str(config))


def launch_plan(spec: Spec, backend: SkyRLParams, data_dir: Path, run_dir: Path) -> list[str]:
    """What `ctu run` does for a `skyrl` spec on `backend`, in order, as readable lines."""
    return [
        f"prepare datasets in {data_dir}: train.parquet and test_<name>.parquet for {', '.join(spec.data.test_sets) or 'no test sets'}",
        f"initialise Ray; {backend.num_nodes} node(s) x {backend.num_gpus_per_node} GPU(s), strategy {backend.strategy}, "
        f"{backend.num_inference_engines} vLLM engine(s) of tensor-parallel size {backend.inference_engine_tensor_parallel_size}",
        "in the remote entrypoint: load the spec again, register `tau_bench` with skyrl-gym, run CtuPPOExp",
        f"generator {spec.rollout.generator.type} (native tool calling: {spec.rollout.native_tool_calling}), "
        f"rewards {[r.type for r in spec.rewards]}, trackers {[t.type for t in spec.tracking.trackers]}",
        f"write checkpoints, metrics and trajectories under {run_dir}",
    ]


def prepare_data(components: Components, data_dir: Path) -> None:
    """Write `train.parquet` (every training source) and `test_<name>.parquet` (each evaluation set: the
    validation set as `test_validation.parquet`, and each test set; `data_source` set to the set's name) for
    SkyRL's dataset loader: the task rows the Tinker backend trains on (`ctu.runners.task_rows`), in parquet."""
    from ctu.runners.task_rows import source_rows
    from tau_bench_env.data import parquet_rows, write_rows

    spec = components.spec
    train = [row for source in spec.data.train
             for row in parquet_rows(components.domain(source), source_rows(components, source))]
    write_rows(train, data_dir / "train.parquet")
    for name, source in spec.data.evaluation_sets().items():
        write_rows(parquet_rows(components.domain(source), source_rows(components, source, name), name),
                   data_dir / f"test_{name}.parquet")


def latest_checkpoint_step(run_dir: Path) -> int | None:
    """The global step of the newest checkpoint SkyRL saved in `run_dir` (None if none)."""
    marker = Path(run_dir) / "checkpoints" / "latest_ckpt_global_step.txt"
    return int(marker.read_text().strip()) if marker.exists() else None


def batches_yielded(state: Mapping[str, Any]) -> int:
    """Batches a torchdata `StatefulDataLoader` (SkyRL's training dataloader) had handed out in its current epoch
    when `state` (its ``state_dict()``) was taken: ``_num_yielded`` without worker processes, the snapshot's step
    with them (both count from 0 at each epoch's start, torchdata 0.11).

    Raises:
        KeyError: `state` is of neither shape.
    """
    return int(state["_num_yielded"] if "_num_yielded" in state else state["_snapshot"]["_snapshot_step"])


def restart_finished_epoch(run_dir: Path, step: int, train_data: Path, batch_size: int) -> bool:
    """Make a resume from the last batch of an epoch train the next epoch; returns whether it had to.

    SkyRL 0.4.0 restores its training dataloader's position from the checkpoint (``data.pt``); restored right
    after an epoch's last batch, the dataloader finishes that exhausted epoch while the trainer has moved on to
    the next, so the next epoch trains nothing and the run ends early (seen on CPU runs of its trainer). Without
    ``data.pt`` SkyRL starts the dataloader afresh, which at an epoch boundary is the next epoch's start; the file
    is kept as ``data.pt.epoch_end``. The next epoch then visits the tasks in the first epoch's order (SkyRL
    seeds the shuffle per dataloader, not per epoch), where an uninterrupted run would reshuffle. The position is
    the dataloader's own (`batches_yielded`), not the step's: dynamic sampling draws several batches a step.
    """
    import pyarrow.parquet as pq
    import torch

    batches_per_epoch = pq.ParquetFile(train_data).metadata.num_rows // batch_size  # SkyRL drops the last short batch
    state = Path(run_dir) / "checkpoints" / f"global_step_{step}" / "data.pt"
    if batches_per_epoch == 0 or not state.exists():
        return False
    if batches_yielded(torch.load(state, weights_only=True)) < batches_per_epoch:
        return False
    state.replace(state.with_name("data.pt.epoch_end"))
    return True


def join_cluster(config: Any, backend: SkyRLParams, modules: tuple[str, ...], log_file: Path, verbose: bool) -> None:
    """Join (or start) the Ray cluster for a run whose SkyRL config is `config` (`cluster.init_ray`; Ray's
    connection and packaging lines to `log_file` unless `verbose`), after sweeping what killed runs left in
    ``/dev/shm``, then check every GPU node in the workers' own environment (`cluster.check_nodes`, a line printed
    per node).

    Raises:
        PreflightError: a node lacks `modules`, CUDA sees no GPU there, or the placement does not fit.
    """
    import contextlib

    from ctu.backends.skyrl.cluster import check_nodes, init_ray
    from ctu.backends.skyrl.preflight import raise_problems
    from ctu.runners.console import DETACHED_LOGGERS, DRIVER_DETACHED_LOGGERS, route_driver_logs, stderr_to
    from ctu.runners.watchdog import sweep_shared_memory

    sweep_shared_memory()  # what the run's killed processes leave in /dev/shm, once this process is gone
    with contextlib.nullcontext() if verbose else stderr_to(log_file):  # Ray's connection and packaging lines
        init_ray(config, backend, None if verbose else log_file)
    route_driver_logs(log_file, verbose, DETACHED_LOGGERS + DRIVER_DETACHED_LOGGERS)  # Ray's logging config reset them
    seen, problems = check_nodes(backend, modules)
    for line in seen:
        print(f"preflight: {line}", flush=True)
    raise_problems("this Ray cluster", problems)


def open_launch(run_dir: Path, resume: bool, verbose: bool) -> tuple[RunDir, Path, int | None]:
    """The start of a `skyrl` launch (GRPO or SFT): the run directory by absolute path (workers may run elsewhere,
    see `skyrl_overrides`), a new ``logs/skyrl-<time>.log`` that the driver's and the libraries' logs now go to
    (ctu's own lines stay on the console; Ray and torch imported first, their loggers then routed too), and the
    newest checkpoint's step when resuming (else None).

    Raises:
        RunError: `resume` with no checkpoint in `run_dir`.
    """
    from datetime import datetime

    import ray  # noqa: F401  (its loggers exist once it is imported, and are routed below)
    import torch  # noqa: F401  (its logger gets its handler on import)

    from ctu.runners.console import DETACHED_LOGGERS, DRIVER_DETACHED_LOGGERS, route_driver_logs, route_library_logs
    from ctu.runners.rundir import RunError

    run = RunDir(Path(run_dir).absolute())
    log_file = run.path / "logs" / f"skyrl-{datetime.now():%y%m%d_%H%M%S}.log"
    # before SkyRL's config imports vLLM, whose import warns; loguru is SkyRL's logger here too
    route_driver_logs(log_file, verbose, DETACHED_LOGGERS + DRIVER_DETACHED_LOGGERS)
    route_library_logs(log_file, verbose)
    resume_step = latest_checkpoint_step(run.path) if resume else None
    if resume and resume_step is None:
        raise RunError(f"{run.path} has no checkpoint to resume from")
    return run, log_file, resume_step


def run_skyrl(spec: Spec, backend: SkyRLParams, run_dir: Path, resume: bool = False, verbose: bool = False) -> RunState:
    """Launch `spec` through SkyRL on the Ray cluster at ``RAY_ADDRESS`` (or a one-node cluster started here),
    after the preflight checks; returns the final state.

    In order: SkyRL's config, the checks that need no cluster (`check_skyrl_run`), the datasets, Ray
    (`cluster.init_ray`, the workers in the driver's environment), the checks on every GPU node in the workers'
    own environment (`cluster.check_nodes`, a line printed per node), and only then the run directory's record of
    a started run: the resolved spec (with its hash and versions) and `state.json` (the backend and the newest
    checkpoint's step), as on the Tinker backend, so `ctu run --resume` and `--overwrite` work alike, and a run
    that never started leaves nothing a later `ctu run` would take for one. The API keys the spec names
    (`ctu.spec.secrets`) go from this process's environment to the Ray entrypoint as an argument, in memory,
    and the entrypoint probes the endpoints again from its node with them before anything else.

    Args:
        spec: a valid spec whose backend is `skyrl`.
        backend: the params the `skyrl` backend was built with (the spec's `backend` section).
        run_dir: the run directory.
        resume: continue from the newest checkpoint in `run_dir`; metric lines of later steps are dropped first.
        verbose: show SkyRL's and the libraries' logs on the console too; they always go to
            ``logs/skyrl-<time>.log`` in the run directory (its path printed once), ctu's own lines to the console.

    Raises:
        PreflightError: an endpoint does not answer or refuses the key (from this machine, or from the entrypoint's
            node), the GPU packages do not import (on this machine or a node),
            CUDA sees no GPU, or the placement does not fit.
        RunError: `resume` with no checkpoint in `run_dir`.
    """
    import ray

    from ctu.backends.skyrl.cluster import joining_cluster
    from ctu.backends.skyrl.preflight import check_skyrl_run, required_modules
    from ctu.errors import CtuError

    run, log_file, resume_step = open_launch(run_dir, resume, verbose)
    data_dir = run.path / "data"
    components = build_components(spec)
    config = resolve_skyrl_config(spec, backend, data_dir, run.path, resume, components)
    engine = config.generator.inference_engine
    modules = required_modules(engine.run_engines_locally and not engine.external_proxy_url and not engine.external_server_urls)
    for line in check_skyrl_run(spec, backend, joining_cluster(), modules):
        print(f"preflight: {line}", flush=True)
    run.path.mkdir(parents=True, exist_ok=True)
    prepare_data(components, data_dir)
    from ctu.backends.skyrl.experiment import skyrl_entrypoint
    from ctu.spec.secrets import secret_values

    join_cluster(config, backend, modules, log_file, verbose)
    run.write_spec(spec)
    run.write_state({"backend": "skyrl", "step": resume_step or 0})
    if resume_step is not None and restart_finished_epoch(run.path, resume_step, data_dir / "train.parquet",
                                                          spec.trainer.train_batch_size):
        print(f"resuming after step {resume_step}, the last batch of an epoch: the next epoch starts afresh (SkyRL "
              "says it found no dataloader state; ctu set it aside as data.pt.epoch_end)", flush=True)
    print(f"SkyRL's and the libraries' logs: {log_file}" + ("" if verbose else " (`ctu run --verbose` shows them here too)"),
          flush=True)
    try:
        ray.get(skyrl_entrypoint.remote(config, spec.model_dump(mode="json"), str(run.path), resume_step, secret_values(spec),
                                        str(log_file), verbose))
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, CtuError):  # the entrypoint's own checks: a message, not a remote traceback
            raise error.cause from None
        raise
    finally:
        state: RunState = {"backend": "skyrl", "step": latest_checkpoint_step(run.path) or 0}
        run.write_state(state)
        run.plot_rewards()
    return state
