"""`tau_multiturn`: the multi-turn agent loop over tau-bench episodes (policy, tools, simulated user)."""

from __future__ import annotations

from pydantic import Field

from ctu.components.generators.base import LoopSetup
from ctu.registry import ComponentParams, registry


@registry.generators.register("tau_multiturn")
class TauMultiTurnGenerator:
    """Multi-turn tau-bench rollouts: policy turns, tool calls and user replies until the episode ends.

    Builds ctu's agent loop (`ctu.rollout.generator.TauGenerator`, SkyRL's `GeneratorInterface`), written once
    over a sampler protocol (a SkyRL inference client, a Tinker sampling client, or a scripted sampler in
    tests), through `setup.agent_loop`.
    """

    class Params(ComponentParams):
        max_concurrent_episodes: int = Field(256, gt=0)
        """Episodes run concurrently within one `generate` call (over all its processes)."""
        processes: int = Field(1, ge=1, le=256)
        """Worker processes a batch's episodes are spread over, each with an event loop of its own
        (`ctu.rollout.processes`); 1 runs them all on the runner's. One event loop spends about 0.35-0.45 ms of
        CPU a turn asking a chat endpoint and 0.6-0.7 ms on SkyRL's token-in/token-out path (at the benchmark's
        reference speed), so each wave of requests leaves it about the batch's episodes x that apart; P
        processes (a core for each) hold 1/P of the episodes each: 1024 episodes on SkyRL need 4. Needs a sampler that can be sent to another process
        (SkyRL's HTTP inference client, an OpenAI-compatible endpoint), not Tinker's."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def build(self, setup: LoopSetup) -> object:
        """The SkyRL generator over `setup` (a `ctu.rollout.setup.RolloutSetup`); imports skyrl and torch."""
        return setup.agent_loop(max_concurrent_episodes=self.params.max_concurrent_episodes, processes=self.params.processes)
