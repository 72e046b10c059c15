"""The `skyrl` backend: the spec resolved into SkyRL's own config, validated by SkyRL, launched on Ray.

Resolution happens once, on the driver, at one boundary (`skyrl_overrides`), and SkyRL's `validate_cfg`
runs on the result; the launch is `ctu.backends.skyrl.launch`'s, the checkpoints' bookkeeping
`ctu.backends.skyrl.checkpoints`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.backends.skyrl.params import SkyRLParams
from ctu.composition import Components, build_components
from ctu.runners.rundir import RunDir
from ctu.spec import Spec
from ctu.spec.model_family import NATIVE_TOOL_PARSERS, model_family

if TYPE_CHECKING:
    from skyrl.train.config import SkyRLTrainConfig

NEVER = 2**31 - 1
"""A SkyRL interval no run reaches. SkyRL reads an interval of 0 as "off": no checkpoint at all, and no eval set
(so no eval before training either). ctu's 0 means "only at epoch ends / the last step", which SkyRL does for
any positive interval (it saves at each epoch's end and evaluates after the last step)."""

SCHEDULERS = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}
"""`trainer.optimizer.scheduler` -> SkyRL's `optimizer_config.scheduler` (a `transformers.SchedulerType`, each with
the spec's warm-up)."""


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
        **_run_and_schedule(spec, backend, run_dir, resume),
        **_algorithm(spec, backend),
        **_filtering_and_async(spec, backend),
        **_generator(spec, components.chat_template.template_kwargs),
        **_inference_engine(spec, backend),
        **backend.skyrl_overrides,
    }


def _models_and_placement(spec: Spec, backend: SkyRLParams) -> dict[str, object]:
    """The policy and reference models (a ``builtin:`` one by its cache folder), their offload, and where they run."""
    from ctu.models.builtin import local_path

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


def _run_and_schedule(spec: Spec, backend: SkyRLParams, run_dir: Path, resume: bool) -> dict[str, object]:
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
        "trainer.micro_train_batch_size_per_gpu": backend.micro_train_batch_size_per_gpu,
        "trainer.micro_forward_batch_size_per_gpu": backend.micro_train_batch_size_per_gpu,
        "trainer.eval_batch_size": trainer.eval_batch_size,
        # no evaluation set: SkyRL's 0 (it would otherwise evaluate with no dataloader)
        "trainer.eval_interval": (trainer.eval_interval or NEVER)
        if spec.data.evaluation_sets() and (trainer.eval_after_train or trainer.eval_interval) else 0,
        "trainer.eval_before_train": trainer.eval_before_train and not resume and bool(spec.data.evaluation_sets()),
        "trainer.resume_mode": "latest" if resume else "none",
        "trainer.ckpt_interval": trainer.ckpt_interval or NEVER,
        "trainer.max_ckpts_to_keep": trainer.max_ckpts_to_keep,
        "trainer.hf_save_interval": trainer.hf_save_interval or NEVER,  # > 0: SkyRL exports after the last step
        "trainer.max_prompt_length": spec.model.max_model_len,
    }


def _algorithm(spec: Spec, backend: SkyRLParams) -> dict[str, object]:
    """The loss (advantages, clipping, KL and entropy terms) and the optimizer."""
    algorithm, optimizer = spec.algorithm, spec.trainer.optimizer
    return {
        "trainer.algorithm.advantage_estimator": algorithm.advantage_estimator,
        "trainer.algorithm.grpo_norm_by_std": algorithm.norm_adv_by_std,
        "trainer.algorithm.eps_clip_low": algorithm.eps_clip_low,
        "trainer.algorithm.eps_clip_high": algorithm.eps_clip_high,
        "trainer.algorithm.value_clip": backend.value_clip,
        "trainer.algorithm.use_kl_loss": algorithm.use_kl_loss,
        "trainer.algorithm.kl_loss_coef": algorithm.kl_loss_coef,
        "trainer.algorithm.kl_estimator_type": algorithm.kl_estimator,
        "trainer.algorithm.use_entropy_loss": backend.entropy_coef > 0,
        "trainer.algorithm.entropy_loss_coef": backend.entropy_coef,
        "trainer.algorithm.loss_reduction": backend.loss_reduction,
        "trainer.algorithm.policy_loss_type": backend.policy_loss,
        "trainer.policy.optimizer_config.lr": optimizer.lr,
        "trainer.policy.optimizer_config.weight_decay": optimizer.weight_decay,
        "trainer.policy.optimizer_config.max_grad_norm": optimizer.max_grad_norm,
        "trainer.policy.optimizer_config.num_warmup_steps": optimizer.warmup_steps,
        "trainer.policy.optimizer_config.scheduler": SCHEDULERS[optimizer.scheduler],
    }


def _filtering_and_async(spec: Spec, backend: SkyRLParams) -> dict[str, object]:
    """Zero-variance filtering, dynamic sampling, off-policy correction and fully async training. Under
    `backend.fully_async`, dynamic sampling's `filter` is SkyRL's async form of it, ``sample_full_batch`` (its
    synchronous ``dynamic_sampling`` is refused there). Whenever a loss reads the sampler's logprobs,
    ``generator.sampling_params.logprobs`` says so (SkyRL's check); ctu's sampler returns them always."""
    algorithm, fully_async = spec.algorithm, backend.fully_async
    sampling, correction = algorithm.dynamic_sampling, backend.off_policy_correction
    overrides: dict[str, object] = {
        "trainer.algorithm.zero_variance_filter": algorithm.zero_variance_filter or (fully_async is not None and sampling is not None),
        "trainer.algorithm.dynamic_sampling.type": sampling.type if sampling is not None and fully_async is None else None,
        "trainer.fully_async.enabled": fully_async is not None,
    }
    if sampling is not None:
        overrides["trainer.algorithm.dynamic_sampling.max_sample_batches"] = sampling.max_sample_batches
        if sampling.type == "replace":  # SkyRL's filter does not read it
            overrides["trainer.algorithm.dynamic_sampling.min_replace_ratio"] = sampling.min_replace_ratio
    if correction is not None:
        overrides["trainer.algorithm.off_policy_correction.tis_ratio_type"] = correction.tis_ratio_type
        overrides["trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high"] = correction.token_tis_ratio_clip_high
        overrides["trainer.algorithm.off_policy_correction.sequence_tis_ratio_clip_high"] = correction.sequence_tis_ratio_clip_high
    if correction is not None or backend.policy_loss != "regular":
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
        "generator.step_wise_trajectories": rollout.trajectory == "step_wise",
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
                         components: Components | None = None) -> SkyRLTrainConfig:
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


def config_yaml(config: SkyRLTrainConfig) -> str:
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
    from ctu.backends.skyrl.datasets import parquet_rows, write_rows
    from ctu.runners.task_rows import source_rows

    spec = components.spec
    train = [row for source in spec.data.train
             for row in parquet_rows(components.domain(source), source_rows(components, source))]
    write_rows(train, data_dir / "train.parquet")
    for name, source in spec.data.evaluation_sets().items():
        write_rows(parquet_rows(components.domain(source), source_rows(components, source, name), name),
                   data_dir / f"test_{name}.parquet")
