"""The composition root: every component of a validated spec, built once, in one place.

Runners build `Components` from their spec (the Tinker runner in its process, the SkyRL experiment in its Ray
worker) and hand them on; nothing else builds a component from its config. A reward that needs a judge gets
it here, built from its own `judge` param or the spec's top-level `judge` (one judge object per judge config),
never lazily on its first episode. The anchor is confection's `resolve` (explosion/confection): a config in,
built objects out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctu.components.chat_templates.base import ChatTemplate
from ctu.components.generators.base import GeneratorComponent
from ctu.components.judges.base import Judge
from ctu.components.rewards.base import Phase, Reward
from ctu.components.rewards.chain import RewardChain
from ctu.components.trackers.combined import Trackers
from ctu.components.user_fault_detectors.base import UserFaultPolicy
from ctu.registry import registry
from ctu.registry.config import ComponentConfig
from ctu.registry.contracts import dependencies
from ctu.spec.model_family import NATIVE_TOOL_PARSERS, model_family
from ctu.spec.models import DatasetSource, Spec
from tau_bench_env.domain_keys import DomainKey, params_key
from tau_bench_env.interfaces import Parser, UserSimulator

if TYPE_CHECKING:
    from tau_bench_env.domains import Domain

PHASES: tuple[Phase, ...] = ("train", "eval")


@dataclass(frozen=True)
class Components:
    """Everything a spec builds.

    Attributes:
        spec: the validated spec the components come from.
        chat_template: the chat-template policy.
        parser: the spec's tool-call parser (`rollout.parser`).
        native_parser: the model family's own tool-call parser, for native tool calling on token samplers.
        user_simulator: the simulated customer.
        rewards: the reward chain of each phase, judges bound.
        generator: the generator component (`rollout.generator`): how ctu's agent loop runs (`loop_settings()`)
            and what is made of it (`build(loop)`).
        trackers: the spec's trackers, not started (plus a `jsonl` one writing `metrics.jsonl` when none does).
        project: the trackers' project (`tracking_project`).
        domains: every domain of the spec's data sources (training, validation, test sets), one object per name
            and params (`tau_bench_env.domain_keys.params_key`); the environment setup carries them to every episode.
        user_faults: the user-fault detectors and what a fault does (`environment.user_faults`).
    """

    spec: Spec
    chat_template: ChatTemplate
    parser: Parser
    native_parser: Parser
    user_simulator: UserSimulator
    rewards: dict[Phase, RewardChain]
    generator: GeneratorComponent
    trackers: Trackers
    project: str
    domains: dict[DomainKey, Domain]
    user_faults: UserFaultPolicy = field(default_factory=UserFaultPolicy)

    def domain(self, source: DatasetSource) -> Domain:
        """The built domain of a data source of the spec.

        Raises:
            KeyError: `source` is not one of the spec's.
        """
        return self.domains[params_key(source.domain.type, source.domain.params)]


def build_domains(spec: Spec) -> dict[DomainKey, Domain]:
    """The domains of the spec's data sources (training, validation, test sets), each name and params built once
    from ctu's registry (named as registered).

    Raises:
        ComponentError: a domain is no longer registered.
    """
    from ctu.components.domains import build_domain

    domains: dict[DomainKey, Domain] = {}
    for source in (*spec.data.train, *spec.data.evaluation_sets().values()):
        key = params_key(source.domain.type, source.domain.params)
        if key not in domains:
            domains[key] = build_domain(source.domain.type, source.domain.params.model_dump(mode="json"))
    return domains


def tracking_project(spec: Spec, rewards: list[tuple[str, Reward]]) -> str:
    """`tracking.project` with the `project_suffix` of every built reward that declares one (sorted, each once):
    `ctu_with_taxonomy_feedback` for a run with the `taxonomy_feedback` reward."""
    suffixes = sorted({getattr(component, "project_suffix", "") for _, component in rewards})
    return spec.tracking.project + "".join(suffixes)


def build_components(spec: Spec) -> Components:
    """Build every component of `spec`.

    Raises:
        ComponentError: a component is no longer registered (the spec was validated in another process).
        ValueError: a reward that needs a judge has none (the spec check `check_judges` prevents it).
    """
    from ctu.redaction import remember_secrets
    from ctu.spec.secrets import secret_variables

    remember_secrets(secret_variables(spec))  # whatever text carries a key back is scrubbed at its writer
    judges: dict[ComponentConfig[Judge], Judge] = {}

    def judge_for(config: ComponentConfig[Judge]) -> Judge:
        if config not in judges:
            judges[config] = config.build()
        return judges[config]

    built: list[tuple[str, Reward]] = []
    for index, config in enumerate(spec.rewards):
        given: dict[str, object] = {}
        if "judge" in dependencies(registry.rewards.contract, config.factory):
            judge = getattr(config.params, "judge", None) or spec.judge
            if judge is None:
                raise ValueError(f"rewards.{index} ({config.type}) needs a judge and the spec has none")
            given["judge"] = judge_for(judge)
        built.append((config.type, config.build(**given)))
    rewards = {
        phase: RewardChain(phase, tuple((name, c) for name, c in built if phase == "train" or not getattr(c, "training_only", False)))
        for phase in PHASES
    }
    native = NATIVE_TOOL_PARSERS.get(model_family(spec), "hermes")
    return Components(
        spec=spec,
        chat_template=spec.model.chat_template.build(),
        parser=spec.rollout.parser.build(),
        native_parser=ComponentConfig[Parser].named("parsers", native if native in registry.parsers else "auto").build(),
        user_simulator=spec.environment.user_simulator.build(),
        rewards=rewards,
        generator=spec.rollout.generator.build(),
        trackers=Trackers.with_metrics_file([config.build() for config in spec.tracking.trackers]),
        project=tracking_project(spec, built),
        domains=build_domains(spec),
        user_faults=UserFaultPolicy(tuple((config.type, config.build()) for config in spec.environment.user_faults.detectors),
                                    spec.environment.user_faults.action, spec.environment.user_faults.max_retries),
    )
