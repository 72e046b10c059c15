"""The `skyrl` backend's section of a spec (``backend: {type: skyrl, ...}``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from ctu.registry import ComponentParams

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
    runtime_env: RayRuntimeEnv = RayRuntimeEnv()
    """The Ray workers' environment variables and setup hook."""
    skyrl_overrides: dict[str, object] = {}
    """Raw SkyRL config overrides (dotted keys, e.g. `trainer.policy.sequence_parallel_size: 2`), applied last."""
