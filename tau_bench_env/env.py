"""`TauBenchEnv`: one tau-bench episode of one task, as ctu's rollout plays it.

The task is a `tau_bench_env.data.TaskRow` (domain, params, task id). The async methods `ainit` and `astep` are the
interface (the user simulator is async and must not block the event loop); `init` and `step` are synchronous
wrappers for scripts. Nothing here knows a trainer: the skyrl backend wraps the class as a SkyRL-gym environment
at its edge (`ctu.backends.skyrl.gym_env`), and importing this module imports no trainer, Ray or torch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from tau_bench_env.data import TaskRow
from tau_bench_env.domain_keys import DomainKey, key_of
from tau_bench_env.domains import Domain
from tau_bench_env.episode import Episode
from tau_bench_env.interfaces import ParsedTurn, Parser, UserSimulator
from tau_bench_env.outcome import EpisodeConfig, EpisodeResult, Termination

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task


T = TypeVar("T")


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


@dataclass(frozen=True)
class EnvStep:
    """What one policy turn gives back (`TauBenchEnv.astep`).

    Attributes:
        observations: the messages that answer the turn (tool results, the customer's reply), OpenAI format.
        reward: the episode's reward once it is done, else 0.0.
        done: whether the episode ended with this turn.
        metadata: the episode's result (`EpisodeResult.as_dict`) once it is done, else empty.
    """

    observations: list[dict[str, Any]]
    reward: float
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)


class TauBenchEnv:
    """One tau-bench episode of one task.

    Args:
        setup: the run's `EnvSetup`.
        task: the task, as a `TaskRow` or its flat mapping (`TaskRow.from_extras`: a dataset row's extras).
        user_seed: the seed the user simulator samples with (`Episode`), None for unseeded.

    Raises:
        TypeError: `setup` is not an `EnvSetup`.
        KeyError: the task names no domain or task, a domain the setup does not hold, or an unknown task.
    """

    def __init__(self, setup: EnvSetup, task: TaskRow | Mapping[str, object], *, user_seed: int | None = None):
        if not isinstance(setup, EnvSetup):
            raise TypeError(f"TauBenchEnv needs an EnvSetup (user simulator, parser, episode config), got {type(setup).__name__}")
        row = task if isinstance(task, TaskRow) else TaskRow.from_extras(task)
        if row.key not in setup.domains:
            known = ", ".join(f"{name} {params}" for name, params in setup.domains) or "none"
            raise KeyError(f"the environment setup has no domain {row.key[0]} with params {row.key[1]} (it has: {known}); "
                           "a run's domains are those of its spec's data sources")
        domain = setup.domains[row.key]
        self.setup = setup
        self.row = row
        self.episode = Episode(domain, domain.task(row.task_id), setup.user_simulator, setup.parser, setup.config,
                               user_seed=user_seed)
        self.max_turns = setup.config.max_turns
        self.turns = 0

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

    async def astep(self, action: str | ParsedTurn) -> EnvStep:
        """One policy turn: raw text (parsed by the parser) or a parsed turn (native tool calling)."""
        result = await self.episode.step(action)
        self.turns = self.episode.turns
        return EnvStep(list(result.observations), float(result.reward), bool(result.done),
                       result.result.as_dict() if result.result is not None else {})

    def init(self, prompt: list[dict[str, object]] | None = None) -> tuple[list[dict[str, object]], StartInfo]:
        """Synchronous `ainit`."""
        return run_sync(self.ainit(prompt))

    def step(self, action: str | ParsedTurn) -> EnvStep:
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
