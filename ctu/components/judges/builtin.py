"""The built-in judges (their params; verdicts are computed on finished trajectories)."""

from __future__ import annotations

from pydantic import Field

from ctu.components.endpoint import OpenAIEndpointParams
from ctu.registry import ComponentParams, registry

DEFAULT_TAXONOMY: dict[str, float] = {
    "no_error": 1.0,
    "parse_failure": -0.5,
    "tool_error": -0.3,
    "wrong_tool": -0.5,
    "wrong_arguments": -0.5,
    "premature_stop": -0.5,
    "max_turns_reached": -0.3,
    "unconfirmed_write": -1.0,
    "policy_violation": -1.0,
}
"""Error categories and their scores in [-1, 1]; the verdict's score is that of its worst category."""


def _check_scores(taxonomy: dict[str, float]) -> dict[str, float]:
    bad = {name: score for name, score in taxonomy.items() if not -1.0 <= score <= 1.0}
    if bad:
        raise ValueError(f"scores must lie in [-1, 1]: {bad}")
    if not taxonomy:
        raise ValueError("the taxonomy needs at least one category")
    return taxonomy


class TaxonomyParams(ComponentParams):
    """An error taxonomy: category -> score."""

    taxonomy: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TAXONOMY))
    """Error categories with their scores in [-1, 1]."""

    def model_post_init(self, context: object) -> None:
        _check_scores(self.taxonomy)


@registry.judges.register("llm_taxonomy")
class LLMTaxonomyJudge:
    """An LLM on an OpenAI-compatible endpoint classifies the agent's errors into the taxonomy; a failed call gives no bonus."""

    class Params(OpenAIEndpointParams, TaxonomyParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params


@registry.judges.register("rule_taxonomy")
class RuleTaxonomyJudge:
    """Deterministic taxonomy from the trajectory's own signals (parse failures, tool errors, max turns...); offline."""

    class Params(TaxonomyParams):
        pass

    def __init__(self, params: Params) -> None:
        self.params = params
