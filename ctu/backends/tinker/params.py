"""The `tinker` backend's section of a spec (``backend: {type: tinker, ...}``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from ctu.registry import ComponentParams


class TinkerParams(ComponentParams):
    """Any Tinker API server, or SkyRL's Tinker API server with its JAX backend started locally (the CPU path)."""

    base_url: str | None = None
    """URL of an existing Tinker API server; null with `local: true`."""
    local: bool = True
    """Start SkyRL's Tinker API server with the JAX backend on this machine for the run."""
    api_key_env: str = "TINKER_API_KEY"
    """Environment variable holding the API key (a local server accepts any `tml-` key)."""
    loss: Literal["importance_sampling", "ppo"] = "importance_sampling"
    """Tinker loss for the GRPO update."""
    lora_rank: PositiveInt = Field(8, le=1024)
    """LoRA rank of the trained adapter. SkyRL's local Tinker server (`local: true`; skyrl 0.4.0's
    `skyrl/tinker/api.py`) puts the adapter on the attention and MLP layers with alpha 32 whatever the client asks:
    the embedding and output head stay the base model's."""
    sample_batch_size: PositiveInt = Field(1, le=256)
    """With `local: true`: sequences the JAX engine samples in one compiled batch (SkyRL's
    `sample_max_num_sequences`). The engine pads every batch to this size and compiles one program per length
    bucket, so the size is a trade: many short episodes at once gain, a few long prompts pay for the padding.
    Measured on this repository's 2-core CPU (2026-11-28): the chain check's GRPO step (64 episodes of ~500-token
    prompts, `specs/learning_chain/`, which sets 16) sampled in 17.5 s at 1, 3.0 s at 16, 3.4 s at 32, 6.1 s at 64;
    the main job (`specs/smoke.yaml`: 8 retail episodes of ~5k-token prompts) took 4.5 min from an empty cache at
    16 against 3.0 min at 1 (`benchmarks/main_job.py`)."""
