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
