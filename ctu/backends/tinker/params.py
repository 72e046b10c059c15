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
    """LoRA rank of the trained adapter."""
    sample_batch_size: PositiveInt = Field(16, le=256)
    """With `local: true`: sequences the JAX engine samples in one compiled batch (SkyRL's
    `sample_max_num_sequences`). The engine pads every batch to this size and compiles one program per length
    bucket, so the size is a trade: a few concurrent episodes pay for the padding, many wait in line at 1. On the
    chain check's GRPO stage (64 episodes a step, the built-in model) a step sampled in 17.5 s at 1, 3.0 s at 16,
    3.4 s at 32 and 6.1 s at 64 (2026-11-28, this repository's 2-core CPU)."""
