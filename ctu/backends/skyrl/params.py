"""The `skyrl` backend's section of a spec (``backend: {type: skyrl, ...}``): the cluster, and the training features
only SkyRL's trainer has (micro-batches, its policy losses against the sampler's logprobs, off-policy correction,
fully async training). Those four were once written under `trainer:` and `algorithm:`; a spec that still does is
read with a deprecation warning (`ctu.spec.moved`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from ctu.registry import ComponentParams
from ctu.spec.section import MAX_BATCH

MAX_GPUS_PER_NODE = 16
"""The most GPUs one node has (HGX nodes hold 8, a few 16); tensor parallelism stays within a node."""


class RayRuntimeEnv(ComponentParams):
    """What every Ray worker process of a `skyrl` run gets (the entrypoint, the trainer's workers, SkyRL's vLLM
    servers), in Ray's own terms (`ray.init(runtime_env=...)`). ctu adds SkyRL's own variables and, when the driver
    runs in a virtual environment, points the workers at it (see docs/running.md)."""

    env_vars: dict[str, str] = {}
    """Environment variables for the workers (e.g. NCCL settings); applied after SkyRL's and ctu's own. The driver's
    environment does not reach workers that `ray start` launched on a node: name here what they need, but never a
    secret (refused: Ray logs these on every node); the keys components name in `api_key_env` reach the rollouts
    without it."""
    worker_process_setup_hook: str | None = None
    """A function, as `module.function`, each worker process calls once at start, before it imports anything of
    the run (Ray's `worker_process_setup_hook`; called by ctu's own hook, right after it routes the worker's
    output: `ctu.backends.skyrl.worker_setup`)."""


class OffPolicyCorrection(ComponentParams):
    """Truncated importance sampling of the rollout policy (Yao et al. 2025, "Your efficient RL framework secretly
    brings you off-policy RL training"): the loss is weighted by the ratio of the trainer's to the sampler's
    probability of each sampled token, capped (SkyRL's `algorithm.off_policy_correction`)."""

    tis_ratio_type: Literal["token", "sequence"] = "token"
    """`token`: one ratio per token; `sequence`: the product over the trajectory's tokens."""
    token_tis_ratio_clip_high: float = Field(2.0, gt=1.0)
    """`token`: the cap on each token's ratio (SkyRL's default; it recommends 1.5-5)."""
    sequence_tis_ratio_clip_high: float = Field(5.0, gt=1.0)
    """`sequence`: the cap on a trajectory's ratio (SkyRL's default; it recommends 2-10)."""


class FullyAsync(ComponentParams):
    """Asynchronous training (SkyRL's fully async trainer; AReaL, Fu et al. 2025, arXiv:2505.24298): episodes are
    sampled while the trainer trains, each group by the newest weights when it started, and a step trains on the
    first `trainer.policy_mini_batch_size` groups to finish."""

    max_staleness_steps: int = Field(1, ge=0, le=100)
    """A group started at step i is trained at step j <= i + this; 0 is on-policy. Logged per step as
    `async/staleness_mean` and `async/staleness_max` (steps between a trained group's start and its step)."""
    num_parallel_generation_workers: PositiveInt | None = None
    """Groups in flight at once, between `policy_mini_batch_size` and `policy_mini_batch_size x (max_staleness_steps
    + 1)`; null: the largest."""


class SkyRLParams(ComponentParams):
    """SkyRL on a GPU cluster: Ray, vLLM inference engines and an FSDP trainer. The run joins the Ray cluster at
    `RAY_ADDRESS` when it is set (started with `ray start` on each node), else starts one on this machine."""

    num_nodes: PositiveInt = Field(1, le=1024)
    """Nodes for the policy."""
    num_gpus_per_node: PositiveInt = Field(4, le=MAX_GPUS_PER_NODE)
    """GPUs per node for the policy."""
    strategy: Literal["fsdp", "megatron"] = "fsdp"
    """Trainer sharding strategy."""
    colocate_all: bool = True
    """Colocate the trainer and the inference engines on the same GPUs."""
    num_inference_engines: PositiveInt = Field(4, le=1024 * MAX_GPUS_PER_NODE)
    """vLLM engines."""
    inference_engine_tensor_parallel_size: PositiveInt = Field(1, le=MAX_GPUS_PER_NODE)
    """Tensor-parallel size of each vLLM engine."""
    gpu_memory_utilization: float = Field(0.8, gt=0.0, le=1.0)
    """Fraction of GPU memory vLLM may take."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass to save memory."""
    policy_cpu_offload: bool = False
    """Keep the policy's FSDP parameters, gradients and optimizer state in CPU memory (FSDP2's own offload;
    SkyRL's `trainer.policy.fsdp_config.cpu_offload`): slower steps, room for a larger model."""
    ref_cpu_offload: bool = False
    """Keep the reference model's FSDP parameters in CPU memory (SkyRL's `trainer.ref.fsdp_config.cpu_offload`)."""
    micro_train_batch_size_per_gpu: PositiveInt = Field(1, le=MAX_BATCH)
    """Sequences per forward/backward pass on one GPU (SkyRL's `micro_train_batch_size_per_gpu` and
    `micro_forward_batch_size_per_gpu`); must divide a mini-batch's sequences per GPU. Was `trainer.`."""
    policy_loss: Literal["regular", "rollout_is", "dppo"] = "regular"
    """The policy loss (SkyRL's `policy_loss_type`). `regular`: PPO's clipped ratio to the policy before the step
    (recomputed by the trainer). `rollout_is` (GLM-5 report, arXiv:2602.15763, section 4.1.2) and `dppo`
    (arXiv:2602.04879) weigh against the sampler's own logprobs, as asynchronous training needs (`fully_async`).
    Was `algorithm.`; the tinker backend's loss is its `loss`."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus coefficient in the loss (0 is off; SkyRL's `entropy_loss_coef`). Was `algorithm.`."""
    loss_reduction: Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm"] = "token_mean"
    """How token losses are averaged into the batch loss (SkyRL's `loss_reduction`). Was `algorithm.`; the tinker
    backend's loss is Tinker's sum over the tokens of each datum."""
    value_clip: float = Field(0.1, gt=0.0)
    """Value clip of a critic's loss (SkyRL's `value_clip`; GRPO has no critic, so it changes nothing there). Was
    `algorithm.`."""
    off_policy_correction: OffPolicyCorrection | None = None
    """Correct for the sampler's probabilities differing from the trainer's (null: off). Needs the sampler's
    logprobs of the sampled ids after temperature, which ctu's SkyRL sampler always returns. Was `algorithm.`."""
    fully_async: FullyAsync | None = None
    """Train asynchronously (null: synchronous: every step samples, then trains). Needs `trainer.train_batch_size`
    equal to `trainer.policy_mini_batch_size`, a loss against the sampler's logprobs (`policy_loss: rollout_is` or
    `dppo`), and the policy and vLLM on separate GPUs (`colocate_all: false`). Was `trainer.`."""
    runtime_env: RayRuntimeEnv = RayRuntimeEnv()
    """The Ray workers' environment variables and setup hook."""
    skyrl_overrides: dict[str, object] = {}
    """Raw SkyRL config overrides (dotted keys, e.g. `trainer.policy.sequence_parallel_size: 2`), applied last."""
