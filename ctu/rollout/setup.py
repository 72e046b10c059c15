"""From a validated spec to the generator's `RolloutSetup`: the one place runners resolve rollout settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctu.rollout.generator import RolloutSetup, TauGenerator
from ctu.rollout.rewards import RewardChain
from ctu.rollout.sampling import Sampler, SamplingParams
from ctu.spec.model_family import NATIVE_TOOL_PARSERS, model_family
from ctu.spec.models import Spec
from tau_bench_env.env import EnvSetup
from tau_bench_env.episode import EpisodeConfig


def sampling_params(spec: Spec, phase: str, eos_id: int | None) -> SamplingParams:
    """Sampling params of `phase` from the spec's `rollout` section."""
    rollout = spec.rollout
    return SamplingParams(
        temperature=rollout.temperature if phase == "train" else rollout.eval_temperature,
        top_p=rollout.top_p if phase == "train" else 1.0,
        max_tokens=rollout.max_tokens_per_turn,
        repetition_penalty=rollout.repetition_penalty,
        stop_token_ids=(eos_id,) if eos_id is not None else (),
        seed=spec.experiment.seed if phase == "eval" else None,
    )


def env_setup(spec: Spec) -> EnvSetup:
    """The environment setup: user simulator, parser and episode config built from the spec."""
    config = EpisodeConfig(
        max_turns=spec.environment.max_turns,
        max_errors=spec.environment.max_errors,
        native_tool_calling=spec.rollout.native_tool_calling,
        evaluate_nl_assertions=spec.environment.evaluate_nl_assertions,
    )
    return EnvSetup(spec.environment.user_simulator.build(), spec.rollout.parser.build(), config)


def native_parser(spec: Spec) -> Any:
    """The parser of the model family's own tool-call format, for native tool calling on token samplers."""
    from ctu.registry import registry

    name = NATIVE_TOOL_PARSERS.get(model_family(spec), "hermes")
    info = registry.parsers.get(name if name in registry.parsers else "auto")
    return info.build(info.params_model())


def build_generator(
    spec: Spec,
    tokenizer: Any,
    sampler: Sampler,
    on_records: Callable[..., None] | None = None,
    on_episode: Callable[[int, bool], None] | None = None,
) -> TauGenerator:
    """The spec's generator component, built over `sampler` and `tokenizer`."""
    eos = tokenizer.eos_token_id
    setup = RolloutSetup(
        tokenizer=tokenizer,
        chat_template=spec.model.chat_template.build(),
        sampler=sampler,
        env=env_setup(spec),
        rewards={phase: RewardChain.build(spec.rewards, phase, spec.judge) for phase in ("train", "eval")},
        sampling={phase: sampling_params(spec, phase, eos) for phase in ("train", "eval")},
        max_model_len=spec.model.max_model_len,
        native_tool_calling=spec.rollout.native_tool_calling,
        native_parser=native_parser(spec),
        on_records=on_records,
        on_episode=on_episode,
    )
    return spec.rollout.generator.build().build(setup)
