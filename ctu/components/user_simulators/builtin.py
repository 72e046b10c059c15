"""The built-in user simulators (their params; episodes drive them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctu.components.endpoint import OpenAIEndpointParams
from ctu.registry import ComponentParams, registry


@registry.user_simulators.register("llm")
class LLMUserSimulator:
    """An LLM on an OpenAI-compatible endpoint plays the customer from the tau2 task's instructions."""

    class Params(OpenAIEndpointParams):
        strategy: Literal["llm", "react", "verify", "reflection"] = "llm"
        """User strategy: plain `llm`, `react` (thought then reply), `verify` (checks its reply), `reflection`."""

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.user_simulators.register("scripted")
class ScriptedUserSimulator:
    """Offline deterministic customer built from the task's scenario; for tests and CPU smoke runs, not for results."""

    class Params(ComponentParams):
        turn_budget: int = Field(10, gt=0)
        """User turns after which the scripted user stops the conversation."""

    def __init__(self, params: Params) -> None:
        self.params = params
