"""What every spec section shares: the `Section` base (unknown keys rejected, no booleans as numbers, attribute
docstrings as descriptions), the bounds that catch typos, and the component-reference field types (what pydantic
validates: a name or a mapping looked up in the kind's registry; what the type checker sees: the kind's contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, model_validator

from ctu.registry import booleans_as_numbers
from ctu.registry.config import ComponentConfig, ComponentMarker


class Section(BaseModel):
    """Base of every spec section: unknown keys are errors, infinities, NaN and booleans are not numbers;
    attribute docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        return booleans_as_numbers(cls, data)


MAX_CONTEXT = 1_048_576
"""The longest context a spec may ask for, in tokens: the longest of the open models this field trains
(Qwen2.5-7B-Instruct-1M); a larger number is a typo."""
MAX_BATCH = 65_536
"""The largest batch (tasks, or sequences per GPU) a spec may ask for; a larger number is a typo."""


def by_name(name: str) -> Any:
    """The default of a component field: the component's registered name, validated into a `ComponentConfig`
    with the spec (`validate_default`)."""
    return name


if TYPE_CHECKING:  # what each field builds, for the type checker: the kind's Protocol (or base class)
    from ctu.components.chat_templates.base import ChatTemplate
    from ctu.components.generators.base import GeneratorComponent
    from ctu.components.judges.base import Judge
    from ctu.components.rewards.base import Reward
    from ctu.components.task_generators.base import TaskGenerator
    from ctu.components.trackers.base import Tracker
    from ctu.components.user_fault_detectors.base import UserFaultDetector
    from ctu.spec.backend_rules import BackendRules
    from tau_bench_env.domains import Domain
    from tau_bench_env.interfaces import Parser, UserSimulator

    ChatTemplateRef = ComponentConfig[ChatTemplate]
    DomainRef = ComponentConfig[Domain]
    UserSimulatorRef = ComponentConfig[UserSimulator]
    GeneratorRef = ComponentConfig[GeneratorComponent]
    ParserRef = ComponentConfig[Parser]
    RewardRef = ComponentConfig[Reward]
    JudgeRef = ComponentConfig[Judge]
    TrackerRef = ComponentConfig[Tracker]
    BackendRef = ComponentConfig[BackendRules]
    TaskGeneratorRef = ComponentConfig[TaskGenerator]
    UserFaultDetectorRef = ComponentConfig[UserFaultDetector]
else:  # what pydantic validates: a name or a mapping, looked up in the kind's registry
    ChatTemplateRef = Annotated[ComponentConfig, ComponentMarker("chat_templates")]
    DomainRef = Annotated[ComponentConfig, ComponentMarker("domains")]
    UserSimulatorRef = Annotated[ComponentConfig, ComponentMarker("user_simulators")]
    GeneratorRef = Annotated[ComponentConfig, ComponentMarker("generators")]
    ParserRef = Annotated[ComponentConfig, ComponentMarker("parsers")]
    RewardRef = Annotated[ComponentConfig, ComponentMarker("rewards")]
    JudgeRef = Annotated[ComponentConfig, ComponentMarker("judges")]
    TrackerRef = Annotated[ComponentConfig, ComponentMarker("trackers")]
    BackendRef = Annotated[ComponentConfig, ComponentMarker("backends")]
    TaskGeneratorRef = Annotated[ComponentConfig, ComponentMarker("task_generators")]
    UserFaultDetectorRef = Annotated[ComponentConfig, ComponentMarker("user_fault_detectors")]
