"""`tau_multiturn`: the multi-turn agent loop over tau-bench episodes (policy, tools, simulated user)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ctu.components.generators.base import LoopSettings
from ctu.registry import ComponentParams


class TauMultiTurnGenerator:
    """Multi-turn tau-bench rollouts: policy turns, tool calls and user replies until the episode ends.

    ctu's agent loop itself (`ctu.rollout.generator.TauGenerator`, a `ctu.rollout.records.Rollout`), written once
    over a sampler protocol (a SkyRL inference client, a Tinker sampling client, or a scripted sampler in
    tests), run as its params say.
    """

    class Params(ComponentParams):
        max_concurrent_episodes: int = Field(256, gt=0)
        """Episodes run concurrently within one batch (`Rollout.run_batch`, over all its processes)."""
        processes: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = "auto"
        """Worker processes a batch's episodes are spread over, each with an event loop of its own
        (`ctu.rollout.processes`); 1 runs them all on the runner's. One event loop spends about 0.3-0.5 ms of CPU
        a turn, asking a chat endpoint or SkyRL's engines token-in/token-out (at the benchmark's reference speed),
        so each wave of requests leaves it about its episodes x that apart; P processes (a core for each) hold
        1/P of the episodes each. ``auto`` (the default): enough that a loop holds at most 128 episodes, with a
        core left to the runner, so 1 on a machine of 2 cores (`ctu.rollout.processes.auto_processes`), and 1
        with a sampler that cannot go to another process. A number > 1 needs a sampler that can be sent to
        another process (SkyRL's HTTP inference client, an OpenAI-compatible endpoint), not the Tinker training
        loop's (its client is replaced at every step)."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def loop_settings(self) -> LoopSettings:
        """The loop's concurrency and processes, from the params."""
        return LoopSettings(self.params.max_concurrent_episodes, self.params.processes)

    def build(self, loop: object) -> object:
        """ctu's agent loop, unchanged."""
        return loop
