"""ctu's `TauBenchEnv` as a SkyRL-gym text environment, registered as ``tau_bench`` (`ctu.backends.skyrl.datasets.ENV_CLASS`,
the `env_class` column of prepared datasets): the one place SkyRL-gym meets the environment.

ctu's own generator plays episodes with `TauBenchEnv` directly; SkyRL's config and its dataset name an
environment class, and a user's SkyRL code may build one with ``skyrl_gym.make``, so the skyrl backend registers
this wrapper in every Ray worker it starts (`register_with_skyrl_gym`, called by the entrypoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from ctu.backends.skyrl.datasets import ENV_CLASS
from tau_bench_env.env import EnvSetup, StartInfo, TauBenchEnv
from tau_bench_env.interfaces import ParsedTurn

ENTRY_POINT = f"{__name__}:SkyRLGymEnv"
"""Where skyrl-gym's registry finds the class."""


class SkyRLGymEnv(BaseTextEnv):
    """One tau-bench episode as a SkyRL-gym `BaseTextEnv`, over a `TauBenchEnv` (`env`).

    Args:
        env_config: the run's `EnvSetup`.
        extras: the dataset row's extras (`tau_bench_env.data.TaskRow.from_extras`: ``domain``, ``task_id``,
            optionally ``domain_params``, also nested under ``extra_info``).
        user_seed: the seed the user simulator samples with, None for unseeded.

    Raises:
        TypeError: `env_config` is not an `EnvSetup`.
        KeyError: the extras name no domain or task, a domain the setup does not hold, or an unknown task.
    """

    def __init__(self, env_config: EnvSetup, extras: Mapping[str, object] | None = None, *, user_seed: int | None = None):
        super().__init__()
        self.env = TauBenchEnv(env_config, dict(extras or {}), user_seed=user_seed)
        self.max_turns = self.env.max_turns

    async def ainit(self, prompt: list[dict[str, object]] | None = None) -> tuple[list[dict[str, object]], StartInfo]:
        """`TauBenchEnv.ainit`."""
        return await self.env.ainit(prompt)

    async def astep(self, action: str | ParsedTurn) -> BaseTextEnvStepOutput:
        """`TauBenchEnv.astep`, as SkyRL-gym's step output."""
        step = await self.env.astep(action)
        self.turns = self.env.turns
        return BaseTextEnvStepOutput(observations=step.observations, reward=step.reward, done=step.done,
                                     metadata=step.metadata, postprocessed_action=None)

    def init(self, prompt: list[dict[str, object]] | None = None) -> tuple[list[dict[str, object]], StartInfo]:
        """`TauBenchEnv.init`."""
        return self.env.init(prompt)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Synchronous `astep`."""
        from tau_bench_env.env import run_sync

        return run_sync(self.astep(action))

    def get_metrics(self) -> dict[str, Any]:
        """`TauBenchEnv.get_metrics`."""
        return self.env.get_metrics()


def register_with_skyrl_gym() -> None:
    """Register `SkyRLGymEnv` with skyrl-gym as ``tau_bench`` (idempotent; the entrypoint calls it in its Ray worker)."""
    from skyrl_gym.envs import registration

    if ENV_CLASS not in registration.registry:
        registration.register(id=ENV_CLASS, entry_point=ENTRY_POINT)
