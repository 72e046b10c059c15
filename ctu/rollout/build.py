"""From built components (`ctu.composition.Components`) to the generator's `RolloutSetup`: the one place runners
resolve rollout settings."""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctu.components.chat_templates.base import Tokenizer
from ctu.components.rewards.base import Phase
from ctu.composition import PHASES, Components, build_components
from ctu.errors import ComponentError
from ctu.rollout.records import Rollout, RolloutBatch, TrajectoryRecord
from ctu.rollout.requests import EpisodeRequest
from ctu.rollout.sampling import Sampler, SamplingParams
from ctu.rollout.setup import RolloutSetup
from ctu.spec import spec_from_dict, spec_to_dict
from ctu.spec.models import Spec
from tau_bench_env.env import EnvSetup

logger = logging.getLogger(__name__)


def sampling_params(spec: Spec, phase: str, eos_id: int | None) -> SamplingParams:
    """Sampling params of `phase` from the spec's `rollout` section."""
    rollout = spec.rollout
    return SamplingParams(
        temperature=rollout.temperature if phase == "train" else rollout.eval_temperature,
        top_p=rollout.top_p if phase == "train" else 1.0,
        max_tokens=rollout.max_tokens_per_turn,
        repetition_penalty=rollout.repetition_penalty,
        frequency_penalty=rollout.frequency_penalty,
        presence_penalty=rollout.presence_penalty,
        stop_token_ids=(eos_id,) if eos_id is not None else (),
        seed=spec.experiment.seed if phase == "eval" else None,
    )


def env_setup(components: Components) -> EnvSetup:
    """The environment setup: the built user simulator, parser and domains, and the spec's episode config."""
    return EnvSetup(components.user_simulator, components.parser, components.spec.episode_config(), components.domains)


def rollout_setup(
    components: Components,
    tokenizer: Tokenizer,
    sampler: Sampler,
    on_records: Callable[..., object] | None = None,
    on_episode: Callable[[int, bool], None] | None = None,
) -> RolloutSetup:
    """The agent loop's setup: `components` (the spec's), the policy's `sampler` and `tokenizer`, and the runner's
    callbacks; `in_worker` rebuilds it (callbacks aside) from the spec in a worker process (`WorkerSetup`)."""
    spec = components.spec
    eos = tokenizer.eos_token_id
    return RolloutSetup(
        tokenizer=tokenizer,
        chat_template=components.chat_template,
        sampler=sampler,
        env=env_setup(components),
        rewards=dict(components.rewards),
        user_faults=components.user_faults,
        sampling={phase: sampling_params(spec, phase, eos) for phase in PHASES},
        max_model_len=spec.model.max_model_len,
        overflow_reward=spec.environment.overflow.reward,
        overflow_exclude=spec.environment.overflow.exclude,
        step_wise=spec.rollout.trajectory == "step_wise",
        native_tool_calling=spec.rollout.native_tool_calling,
        native_parser=components.native_parser,
        on_records=on_records,
        on_episode=on_episode,
        in_worker=WorkerSetup(spec_to_dict(spec), tokenizer, sampler),
    )


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process needs to build a `RolloutSetup` again (`ProcessRollout`): the resolved spec as
    plain data, the tokenizer and the sampler; picklable when the sampler is. Calling it registers ctu's
    components, loads the spec (importing its `imports`, relative to the current directory, which a spawned
    worker shares), builds its components and returns the setup, without callbacks.

    Raises (when called):
        SpecError: the spec no longer loads (a file of its `imports` is gone).
    """

    spec: dict[str, object]
    tokenizer: Tokenizer
    sampler: Sampler

    def __call__(self) -> RolloutSetup:
        spec = spec_from_dict(self.spec, source="the resolved spec, in a rollout worker").spec
        return rollout_setup(build_components(spec), self.tokenizer, self.sampler)


def build_generator(
    components: Components,
    tokenizer: Tokenizer,
    sampler: Sampler,
    on_records: Callable[..., object] | None = None,
    on_episode: Callable[[int, bool], None] | None = None,
) -> Rollout:
    """The generator of `components` (the spec's `rollout.generator`) over `sampler` and `tokenizer`: ctu's agent
    loop built with the component's `loop_settings()`, handed to its `build` to return or wrap.

    Raises:
        ComponentError: the generator component built something without the `Rollout` interface, or could not
            build (a loop over worker processes whose sampler cannot be sent to them).
    """
    spec = components.spec
    setup = rollout_setup(components, tokenizer, sampler, on_records, on_episode)
    built = components.generator.build(setup.agent_loop(components.generator.loop_settings()))
    if not isinstance(built, Rollout):
        missing = [name for name in ("run_batch", "run_episode") if not hasattr(built, name)]
        raise ComponentError(f"generator component {spec.rollout.generator.type!r} built a {type(built).__name__}, which "
                             f"lacks ctu's rollout contract (`ctu.rollout.records.Rollout`): "
                             f"{', '.join(missing)}")
    if OlderRollout.fits(built):
        message = (f"generator component {spec.rollout.generator.type!r} built a {type(built).__name__} with the rollout "
                   "contract before EpisodeRequest (run_batch(prompts, extras, phase, step), run_episode(prompt, extras, "
                   "phase, repetition)); ctu calls it through an adapter (deprecated: take `requests` and `request`, "
                   "ctu.rollout.requests.EpisodeRequest)")
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        logger.warning(message)
        return OlderRollout(built)
    return built


class OlderRollout:
    """A generator written to the rollout contract before `EpisodeRequest`, called through ctu's current one:
    `run_batch(prompts, extras, phase, step)` with each request's prompt and its task's flat extras (a task's k-th
    request in the batch its sample k, as that contract had it), `run_episode(prompt, extras, phase, repetition)`.
    Anything else is the wrapped object's.

    Args:
        inner: the generator of the older contract.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @staticmethod
    def fits(built: object) -> bool:
        """Whether `built`'s `run_batch` takes the older contract's ``prompts`` and ``extras``."""
        try:
            parameters = inspect.signature(built.run_batch).parameters  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            return False
        return "prompts" in parameters and "extras" in parameters

    async def run_batch(self, requests: Sequence[EpisodeRequest], phase: Phase, step: int) -> RolloutBatch:
        """`Rollout.run_batch` through the older contract."""
        batch: RolloutBatch = await self.inner.run_batch([r.prompt for r in requests], [r.task.extras for r in requests],
                                                         phase, step)
        return batch

    async def run_episode(self, request: EpisodeRequest, phase: Phase) -> TrajectoryRecord:
        """`Rollout.run_episode` through the older contract."""
        record: TrajectoryRecord = await self.inner.run_episode(request.prompt, request.task.extras, phase, request.sample or 0)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
