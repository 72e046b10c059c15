"""`tau_multiturn`: the multi-turn agent loop over tau-bench episodes (policy, tools, simulated user)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ctu.registry import ComponentParams, registry


@registry.generators.register("tau_multiturn")
class TauMultiTurnGenerator:
    """Multi-turn tau-bench rollouts: policy turns, tool calls and user replies until the episode ends.

    Builds `ctu.rollout.generator.TauGenerator`, SkyRL's `GeneratorInterface`; the agent loop is written once
    over a sampler protocol (SkyRL inference client, Tinker sampling client, or a scripted sampler in tests).
    """

    class Params(ComponentParams):
        max_concurrent_episodes: int = Field(256, gt=0)
        """Episodes run concurrently within one `generate` call."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def build(self, setup: Any) -> Any:
        """The SkyRL generator over `setup` (a `ctu.rollout.generator.RolloutSetup`); imports skyrl and torch."""
        from dataclasses import replace

        from ctu.rollout.generator import TauGenerator

        return TauGenerator(replace(setup, max_concurrent_episodes=self.params.max_concurrent_episodes))
