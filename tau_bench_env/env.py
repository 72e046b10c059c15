"""`TauBenchEnv`: a tau-bench episode as a SkyRL-gym text environment (registered as ``tau_bench``).

One environment object is one episode of one task; the task comes from the dataset row's extras
(``{"domain": "retail", "task_id": "..."}``, as `ctu data prepare` writes them). The async methods `ainit` and
`astep` are the real interface (the user simulator is async and must not block the event loop); `init` and
`step` are SkyRL-gym's synchronous interface over them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, TypedDict, TypeVar

from pydantic import BaseModel
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from tau_bench_env.domains import Domain
from tau_bench_env.episode import Episode
from tau_bench_env.interfaces import ParsedTurn, Parser, UserSimulator
from tau_bench_env.outcome import EpisodeConfig, EpisodeResult, Termination

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

ENV_CLASS = "tau_bench"
"""The environment's id in skyrl-gym's registry and the `env_class` column of prepared datasets."""

T = TypeVar("T")


DomainKey = tuple[str, str]
"""A domain as rows name it: ``(name, its params as sorted JSON)``."""


def domain_key(name: str, params: object = None) -> DomainKey:
    """The key of domain `name` with `params` (a mapping, or its JSON as parquet rows carry it; anything else, such
    as None: no params)."""
    mapping = json.loads(params) if isinstance(params, str) else dict(params) if isinstance(params, Mapping) else {}
    return name, json.dumps(mapping, sort_keys=True)


@dataclass
class EnvSetup:
    """What every episode of a run shares: the user simulator, the parser, the episode config and the domains
    its tasks come from, by `domain_key` (built once by ctu's composition root from the spec: `ctu.rollout.build`)."""

    user_simulator: UserSimulator
    parser: Parser
    config: EpisodeConfig = field(default_factory=EpisodeConfig)
    domains: Mapping[DomainKey, Domain] = field(default_factory=dict)


@cache
def shared_domain(name: str, params_json: str = "{}") -> Domain:
    """tau2's own domain `name` with its params (JSON), one object per process (so tasks are loaded once): for
    tools and benchmarks outside a run; a run's domains come from its setup.

    Raises:
        KeyError: not one of tau2's domains.
    """
    from tau_bench_env.domains import tau2_domain

    return tau2_domain(name, json.loads(params_json))


def params_key(name: str, params: BaseModel) -> DomainKey:
    """The key of domain `name` built with the params model `params`: the name and the params that differ from
    their defaults (what its task rows carry as ``domain_params``, so a row of tau2's retail without params finds
    it)."""
    return domain_key(name, params.model_dump(mode="json", exclude_defaults=True))


def key_of(domain: Domain) -> DomainKey:
    """`domain`'s key (`params_key` of its name and params)."""
    return params_key(domain.name, domain.params)


def tau2_domains(*names: str) -> dict[DomainKey, Domain]:
    """tau2's own domains `names` (no params) by key, for an `EnvSetup` outside ctu."""
    return {key_of(domain): domain for domain in map(shared_domain, names)}


def run_sync(coroutine: Awaitable[T]) -> T:
    """Run `coroutine` to completion from synchronous code: with `asyncio.run` where no event loop runs in this
    thread, else in a new thread with its own loop (``asyncio.run`` refuses to start inside a running loop).

    Raises:
        whatever `coroutine` raises.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()  # type: ignore[arg-type]


class StartInfo(TypedDict):
    """What an episode's start tells the agent loop besides the prompt."""

    tools: list[dict[str, object]]
    """The domain's tools as OpenAI schemas."""
    done: bool
    """Whether the episode is over already (the user hung up at once)."""


class TauBenchEnv(BaseTextEnv):
    """One tau-bench episode as a SkyRL-gym `BaseTextEnv`.

    Args:
        env_config: the run's `EnvSetup`.
        extras: the dataset row's extras: ``domain`` (a registered domain name), ``task_id``, optionally
            ``domain_params`` (a mapping, or its JSON as parquet rows carry it); also accepted under ``extra_info``.
        user_seed: the seed the user simulator samples with (`Episode`), None for unseeded.

    Raises:
        TypeError: `env_config` is not an `EnvSetup`.
        KeyError: the extras name no domain or task, a domain the setup does not hold, or an unknown task.
    """

    def __init__(self, env_config: EnvSetup, extras: Mapping[str, object] | None = None, *, user_seed: int | None = None):
        super().__init__()
        if not isinstance(env_config, EnvSetup):
            raise TypeError(f"TauBenchEnv needs an EnvSetup (user simulator, parser, episode config), got {type(env_config).__name__}")
        setup = env_config
        extras = dict(extras or {})
        extra_info = extras.get("extra_info")  # SkyRL's dataset rows nest the row's extras here
        extras = {**(extra_info if isinstance(extra_info, dict) else {}), **extras}
        if "domain" not in extras or "task_id" not in extras:
            raise KeyError("TauBenchEnv needs extras with `domain` and `task_id` (see `ctu data prepare`)")
        key = domain_key(str(extras["domain"]), extras.get("domain_params"))
        if key not in setup.domains:
            known = ", ".join(f"{name} {params}" for name, params in setup.domains) or "none"
            raise KeyError(f"the environment setup has no domain {key[0]} with params {key[1]} (it has: {known}); "
                           "a run's domains are those of its spec's data sources")
        domain = setup.domains[key]
        task = domain.task(str(extras["task_id"]))
        self.setup = setup
        self.episode = Episode(domain, task, setup.user_simulator, setup.parser, setup.config, user_seed=user_seed)
        self.max_turns = setup.config.max_turns

    @property
    def tools(self) -> list[dict[str, object]]:
        """OpenAI tool schemas of the domain (after `init`): what native tool calling sends as `tools`."""
        return self.episode.tools

    @property
    def conversation(self) -> list[dict[str, object]]:
        """The OpenAI-format messages so far (a copy): what a chat sampler is sent."""
        return list(self.episode.conversation)

    @property
    def task(self) -> Task:
        """The episode's tau2 task."""
        return self.episode.task

    @property
    def write_tools(self) -> frozenset[str]:
        """The domain's tools that change its database (for rewards that read the trajectory)."""
        return self.episode.domain.write_tools

    def parse(self, text: str) -> ParsedTurn:
        """`text` read by the run's parser; never raises."""
        return self.episode.parse(text)

    async def end(self, termination: Termination) -> None:
        """End the episode early (e.g. the context is full), scored as tau2 scores an unfinished one."""
        await self.episode.end(termination)

    def result(self) -> EpisodeResult:
        """How the episode went (after it ended)."""
        return self.episode.result()

    async def ainit(self, prompt: list[dict[str, object]] | None = None) -> tuple[list[dict[str, object]], StartInfo]:
        """Start the episode. The dataset's prompt is replaced by the episode's own (system prompt with the
        domain policy, and tools in text mode; tau2's greeting; the user's opening message).

        Returns:
            ``(prompt, metadata)``; metadata has ``tools`` (OpenAI schemas) and ``done`` (the user hung up at once).
        """
        conversation = await self.episode.reset()
        return conversation, {"tools": self.episode.tools, "done": self.episode.done}

    async def astep(self, action: str | ParsedTurn) -> BaseTextEnvStepOutput:
        """One policy turn: raw text (parsed by the parser) or a parsed turn (native tool calling)."""
        result = await self.episode.step(action)
        self.turns = self.episode.turns
        return BaseTextEnvStepOutput(
            observations=result.observations,
            reward=result.reward,
            done=result.done,
            metadata=result.result.as_dict() if result.result is not None else {},
            postprocessed_action=None,
        )

    def init(self, prompt: list[dict[str, object]] | None = None) -> tuple[list[dict[str, object]], StartInfo]:
        """Synchronous `ainit`."""
        return run_sync(self.ainit(prompt))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Synchronous `astep`."""
        return run_sync(self.astep(action))

    def get_metrics(self) -> dict[str, object]:
        """Per-episode numbers for `environment/*` metrics."""
        episode = self.episode
        metrics: dict[str, object] = {
            "turns": episode.turns,
            "tool_errors": episode.tool_errors,
            "parse_failures": episode.parse_failures,
            "user_errors": int(episode.user_error is not None),
            "evaluation_errors": int(episode.evaluation_error is not None),
            "reward": episode.reward,
        }
        if episode.termination is not None:
            metrics[f"termination/{episode.termination.value}"] = 1
        return metrics


def register_with_skyrl_gym() -> None:
    """Register `TauBenchEnv` with skyrl-gym as ``tau_bench`` (idempotent; call it in every Ray worker too)."""
    from skyrl_gym.envs import registration

    if ENV_CLASS not in registration.registry:
        registration.register(id=ENV_CLASS, entry_point="tau_bench_env.env:TauBenchEnv")


register_with_skyrl_gym()
