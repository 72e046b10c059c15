"""The `skyrl` backend, as ctu's commands see it (`ctu.runners.backend.Backend`); the work is in `config`,
`preflight`, `cluster` and `experiment`. Importing this module (as loading a spec naming the backend does) imports
neither SkyRL nor Ray; of `ctu.runners` only the contract (`ctu.runners.backend`, which declares it: a backend module
imports its kind's contract)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.backends.skyrl.keys import is_skyrl_config_key, skyrl_config_keys
from ctu.backends.skyrl.params import SkyRLParams
from ctu.errors import did_you_mean
from ctu.runners.backend import LaunchPlan
from ctu.spec.backend_rules import StepCounts, mini_batch_steps
from ctu.spec.errors import SpecIssue
from ctu.spec.models import Spec
from ctu.spec.training import Trainer

if TYPE_CHECKING:
    from ctu.runners.backend import PolicyHandle
    from ctu.runners.rundir import RunDir

SAMPLING_OVERRIDES = ("generator.sampling_params", "generator.eval_sampling_params")
"""SkyRL config sections ctu's generator does not read: it samples with the spec's `rollout` settings."""
SPEC_ENTRIES = {
    "trainer.algorithm.policy_loss_type": "backend.policy_loss",
    "trainer.algorithm.zero_variance_filter": "algorithm.zero_variance_filter",
    "trainer.algorithm.dynamic_sampling": "algorithm.dynamic_sampling",
    "trainer.algorithm.off_policy_correction": "backend.off_policy_correction",
    "trainer.fully_async": "backend.fully_async",
}
"""SkyRL config sections a spec entry sets (and ctu's trainer adapts to: infrastructure errors stay out of
filtering, re-sampling and asynchronous batches): an override of them names the entry instead."""
ROLLOUT_LOSSES = ("rollout_is", "dppo")
"""`backend.policy_loss` values that weigh against the sampler's logprobs, as SkyRL's fully async trainer needs."""


class SkyRLBackend:
    """SkyRL on a GPU cluster: Ray, vLLM inference engines and an FSDP trainer. The run joins the Ray cluster at
    `RAY_ADDRESS` when it is set (started with `ray start` on each node), else starts one on this machine."""

    Params = SkyRLParams

    def __init__(self, params: SkyRLParams) -> None:
        self.params = params

    def step_counts(self, tasks: int, trainer: Trainer) -> StepCounts:
        """SkyRL's dataloader: the last short batch of each epoch dropped, an optimizer step per mini-batch."""
        return mini_batch_steps(tasks, trainer)

    def spec_errors(self, spec: Spec) -> Iterator[SpecIssue]:
        """Batches that do not split over the policy GPUs (SkyRL's `validate_batch_sizes`, or for SFT its
        `SFTTrainer`'s), colocated engines that do not fill them, and `skyrl_overrides` naming no SkyRL field or
        setting what ctu keeps or ignores, `trainer.eval_after_train: false` where SkyRL would evaluate anyway,
        `data.shuffle: false` for GRPO (SkyRL's GRPO dataloader always shuffles), and what step-wise trajectories do
        not run with here (`_step_wise_errors`)."""
        yield from _placement_errors(spec, self.params)
        if not spec.trainer.eval_after_train and spec.data.evaluation_sets() and (spec.trainer.eval_interval or spec.trainer.eval_before_train):
            yield SpecIssue("trainer.eval_after_train", "SkyRL evaluates after the last step whenever it evaluates at all: "
                                                        "with it false, set trainer.eval_interval to 0 and "
                                                        "trainer.eval_before_train to false")
        if spec.data.sft is None and not spec.data.shuffle:
            yield SpecIssue("data.shuffle", "SkyRL's GRPO trainer shuffles its training tasks at every epoch (its "
                                            "dataloader has no switch; its SFT trainer has one): remove it, or use the "
                                            "tinker backend")
        yield from _async_errors(spec, self.params)
        yield from _step_wise_errors(spec, self.params)
        yield from _override_errors(self.params)

    def spec_warnings(self, spec: Spec) -> Iterator[SpecIssue]:
        """Many more full-model exports than `hf_save_interval` says: SkyRL's GRPO trainer exports the policy at every
        epoch's end too (its SFT trainer does not), and each is a full model (16 GB for an 8B one in bf16). Dynamic
        sampling allowed more batches a step than an epoch holds: SkyRL drops a step's partial batch at its epoch's
        end, so an epoch's batches are the real limit."""
        from ctu.spec.schedule import schedule

        plan = schedule(spec)
        if plan is None or not plan.steps_per_epoch:
            return
        sampling = spec.algorithm.dynamic_sampling
        if sampling is not None and not 0 <= sampling.max_sample_batches <= plan.steps_per_epoch:
            yield SpecIssue(
                "algorithm.dynamic_sampling.max_sample_batches",
                f"an epoch holds {plan.steps_per_epoch} batch(es) here, and SkyRL drops what dynamic sampling gathered "
                "for a step when its epoch ends first: a step is filled from the batches left in its epoch, or its "
                f"samples are lost and the run may end short of its {plan.total_steps} steps (not max_sample_batches "
                f"{sampling.max_sample_batches}); more tasks an epoch (data.train) give a step more batches",
            )
        if spec.data.sft is not None:
            return
        interval = spec.trainer.hf_save_interval or plan.total_steps
        exports = len({step for step in range(1, plan.total_steps + 1)
                       if step % plan.steps_per_epoch == 0 or step % interval == 0 or step == plan.total_steps})
        if exports > 2 * (plan.total_steps // interval + 1):
            yield SpecIssue(
                "trainer.hf_save_interval",
                f"SkyRL exports the policy at every epoch's end too: {plan.steps_per_epoch} GRPO step(s) an epoch here, "
                f"so {exports} full-model exports in {plan.total_steps} steps, not {plan.total_steps // interval + 1}; "
                "fewer, longer epochs (a larger task set per epoch) mean fewer exports",
            )

    def deep_check(self, spec: Spec, run_dir: Path) -> tuple[list[str], list[str]]:
        """SkyRL's own `validate_cfg` on the resolved config (imports skyrl); a warning for GPU packages missing
        here (expected on a machine without GPUs)."""
        from ctu.backends.skyrl.config import resolve_skyrl_config
        from ctu.backends.skyrl.preflight import INSTALL_GPU, missing_gpu_packages
        from ctu.backends.skyrl.sft import TOKENS_FILE, resolve_sft_config

        try:
            if spec.data.sft is not None:
                resolve_sft_config(spec, self.params, run_dir / "data" / TOKENS_FILE, run_dir)
            else:
                resolve_skyrl_config(spec, self.params, run_dir / "data", run_dir)
        except (ValueError, AssertionError, TypeError) as error:
            return [f"SkyRL rejects the resolved config: {type(error).__name__}: {error}"], []
        missing = missing_gpu_packages()
        return [], [f"{', '.join(missing)} not installed here; on the GPU machine, {INSTALL_GPU}"] if missing else []

    def plan(self, spec: Spec, run_dir: RunDir) -> LaunchPlan:
        """SkyRL's resolved config (accepted by its `validate_cfg`) and the launch steps.

        Raises:
            SpecError: SkyRL rejects the resolved config.
        """
        from ctu.backends.skyrl.config import config_yaml, launch_plan, resolve_skyrl_config
        from ctu.backends.skyrl.sft import TOKENS_FILE, resolve_sft_config, sft_config_yaml, sft_launch_plan
        from ctu.spec import SpecError

        try:
            if spec.data.sft is not None:
                sft_config, _ = resolve_sft_config(spec, self.params, run_dir.path / "data" / TOKENS_FILE, run_dir.path)
                return LaunchPlan("SkyRL SFT config (accepted by SkyRL's validate_sft_cfg)", sft_config_yaml(sft_config),
                                  sft_launch_plan(spec, self.params, run_dir.path))
            config = resolve_skyrl_config(spec, self.params, run_dir.path / "data", run_dir.path)
        except (ValueError, AssertionError, TypeError) as error:
            raise SpecError([SpecIssue("backend", f"SkyRL rejects the resolved config: {error}")], spec.experiment.name) from None
        return LaunchPlan("SkyRL config (accepted by SkyRL's validate_cfg)", config_yaml(config),
                          launch_plan(spec, self.params, run_dir.path / "data", run_dir.path))

    def run(self, spec: Spec, run_dir: RunDir, *, resume: bool, progress: bool, verbose: bool) -> int:
        """`ctu.backends.skyrl.launch.run_skyrl`, or for SFT (`data.sft`) `ctu.backends.skyrl.sft.run_skyrl_sft`
        (`progress`: the libraries' bars, turned off in `ctu.runners.launch`)."""
        from ctu.backends.skyrl.launch import run_skyrl
        from ctu.backends.skyrl.sft import run_skyrl_sft

        launch = run_skyrl_sft if spec.data.sft is not None else run_skyrl
        return launch(spec, self.params, run_dir.path, resume=resume, verbose=verbose).get("step", 0)

    def policies(self, run_dir: RunDir) -> dict[int, str]:
        """The run's Hugging Face exports (``exports/global_step_N/policy``, every `hf_save_interval` steps, at
        each epoch's end and after the last step)."""
        return run_dir.hf_exports()

    def open_policy(self, spec: Spec, policy: str | None, run_dir: RunDir | None,
                    work_dir: Path, *, in_flight: int | None = None) -> AbstractAsyncContextManager[PolicyHandle]:
        """The policy served by a local Tinker server (SkyRL's, JAX backend: what runs without a GPU), sampling up
        to `in_flight` sequences in one batch (`ctu.backends.tinker.policy.serve_policy`)."""
        from ctu.backends.tinker.policy import serve_policy

        return serve_policy(spec, None, policy, run_dir, work_dir, in_flight=in_flight)


def _placement_errors(spec: Spec, params: SkyRLParams) -> Iterator[SpecIssue]:
    trainer = spec.trainer
    world = params.num_nodes * params.num_gpus_per_node
    if spec.data.sft is not None:  # SFT: a step's conversations split over data-parallel GPUs (SFTTrainer's check)
        if trainer.train_batch_size % world:
            yield SpecIssue("trainer.train_batch_size", f"an SFT step's conversations ({trainer.train_batch_size}) "
                                                        f"must be divisible by the number of policy GPUs ({world})")
        elif (trainer.train_batch_size // world) % params.micro_train_batch_size_per_gpu:
            yield SpecIssue("backend.micro_train_batch_size_per_gpu",
                            f"must divide an SFT step's conversations per GPU ({trainer.train_batch_size // world}); "
                            f"got {params.micro_train_batch_size_per_gpu}")
        return
    sequences = trainer.policy_mini_batch_size * spec.rollout.n_samples_per_prompt
    if sequences % world:
        yield SpecIssue(
            "trainer.policy_mini_batch_size",
            f"policy_mini_batch_size x n_samples_per_prompt ({sequences}) must be divisible by the "
            f"number of policy GPUs ({world})",
        )
    elif (sequences // world) % params.micro_train_batch_size_per_gpu:
        yield SpecIssue(
            "backend.micro_train_batch_size_per_gpu",
            f"must divide the sequences per GPU per mini-batch ({sequences // world}); "
            f"got {params.micro_train_batch_size_per_gpu}",
        )
    engines_gpus = params.num_inference_engines * params.inference_engine_tensor_parallel_size
    if params.colocate_all and engines_gpus != world:
        yield SpecIssue(
            "backend.num_inference_engines",
            f"with colocate_all, inference engines x tensor-parallel size ({engines_gpus}) must equal the "
            f"policy GPUs ({world})",
        )


def _async_errors(spec: Spec, params: SkyRLParams) -> Iterator[SpecIssue]:
    """What SkyRL's fully async trainer asserts at start, said before a cluster is reserved."""
    fully_async = params.fully_async
    if fully_async is None:
        return
    why = "with backend.fully_async"
    if spec.trainer.train_batch_size != spec.trainer.policy_mini_batch_size:
        yield SpecIssue("trainer.policy_mini_batch_size", f"{why}, each step is one mini-batch: set it equal to "
                                                          f"train_batch_size ({spec.trainer.train_batch_size})")
    if params.policy_loss not in ROLLOUT_LOSSES:
        yield SpecIssue("backend.policy_loss", f"{why}, the loss must weigh against the sampler's logprobs (the "
                                                 f"policies that sampled stale groups are gone): {' or '.join(ROLLOUT_LOSSES)}")
    if params.colocate_all:
        yield SpecIssue("backend.colocate_all", f"{why}, vLLM samples while the policy trains: set it false and give "
                                                "the engines GPUs of their own")
    if spec.algorithm.dynamic_sampling is not None and spec.algorithm.dynamic_sampling.type != "filter":
        yield SpecIssue("algorithm.dynamic_sampling.type", f"{why}, only `filter` (SkyRL's sample_full_batch)")
    workers = fully_async.num_parallel_generation_workers
    most = spec.trainer.policy_mini_batch_size * (fully_async.max_staleness_steps + 1)
    if workers is not None and not spec.trainer.policy_mini_batch_size <= workers <= most:
        yield SpecIssue("backend.fully_async.num_parallel_generation_workers",
                        f"must be between policy_mini_batch_size ({spec.trainer.policy_mini_batch_size}) and "
                        f"policy_mini_batch_size x (max_staleness_steps + 1) ({most}); got {workers}")


def _step_wise_errors(spec: Spec, params: SkyRLParams) -> Iterator[SpecIssue]:
    """What SkyRL's step-wise path (`generator.step_wise_trajectories`) does not do: it gives every turn the episode's
    advantage unchanged (no turn discount), and ctu has not carried its turn rows through SkyRL's dynamic sampling
    or its fully async trainer."""
    if spec.rollout.trajectory != "step_wise":
        return
    why = "SkyRL's step-wise trajectories"
    if spec.rollout.turn_discount != 1.0:
        yield SpecIssue("rollout.turn_discount", f"{why} give every turn the episode's advantage unchanged: set 1.0, or "
                                                 "use the tinker backend")
    if spec.algorithm.dynamic_sampling is not None:
        yield SpecIssue("algorithm.dynamic_sampling", f"not run with {why} on the skyrl backend: remove it, or use the "
                                                      "tinker backend (its filter keeps whole groups of episodes)")
    if params.fully_async is not None:
        yield SpecIssue("backend.fully_async", f"not run with {why}: remove it, or set rollout.trajectory: whole")


def _override_errors(params: SkyRLParams) -> Iterator[SpecIssue]:
    """The raw SkyRL escape hatch names only fields of SkyRL's config, cannot switch on what ctu guarantees off,
    nor set what ctu would ignore."""
    for key, value in params.skyrl_overrides.items():
        where = f"backend.skyrl_overrides.{key}"
        if not is_skyrl_config_key(key):
            yield SpecIssue(where, f"not a field of SkyRL's config{did_you_mean(key, skyrl_config_keys())}")
            continue
        entry = next((entry for section, entry in SPEC_ENTRIES.items() if key == section or key.startswith(section + ".")), None)
        if entry is not None:
            yield SpecIssue(where, f"set the spec's `{entry}` instead: ctu's trainer adapts to it (infrastructure "
                                   "errors stay out of filtering, re-sampling and asynchronous batches)")
        if key.split(".")[-1] == "zero_reward_on_non_stop" and value:
            yield SpecIssue(where, "ctu keeps SkyRL's zero_reward_on_non_stop false; add the `zero_on_non_stop` reward instead")
        if key.startswith(SAMPLING_OVERRIDES):
            yield SpecIssue(where, "ctu's generator samples with the spec's `rollout` settings (temperature, top_p, "
                                   "repetition_penalty, frequency_penalty, presence_penalty, max_tokens_per_turn, "
                                   "eval_temperature), never SkyRL's sampling params: set it there")

