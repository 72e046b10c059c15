"""The taxonomy judges: `llm_taxonomy` (an LLM on an endpoint) and `rule_taxonomy` (deterministic, offline)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import ClassVar, Self

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ctu.components.endpoint import OpenAIEndpointParams
from ctu.components.judges.base import EndpointJudge, JudgeInput, Verdict
from ctu.components.parsers.jsonutil import iter_json_objects
from ctu.errors import did_you_mean
from ctu.registry import ComponentParams

NO_ERROR = "no_error"
DEFAULT_TAXONOMY: dict[str, float] = {
    NO_ERROR: 1.0,
    "parse_failure": -0.5,
    "tool_error": -0.3,
    "wrong_tool": -0.5,
    "wrong_arguments": -0.5,
    "premature_stop": -0.5,
    "max_turns_reached": -0.3,
    "unconfirmed_write": -1.0,
    "policy_violation": -1.0,
}
"""Error categories and their scores in [-1, 1]; a verdict's score is that of its worst category."""


def _check_scores(taxonomy: dict[str, float]) -> dict[str, float]:
    bad = {name: score for name, score in taxonomy.items() if not -1.0 <= score <= 1.0}
    if bad:
        raise ValueError(f"scores must lie in [-1, 1]: {bad}")
    if NO_ERROR not in taxonomy:
        raise ValueError(f"the taxonomy needs the category {NO_ERROR!r}")
    return taxonomy


def misspelt_categories(taxonomy: dict[str, float], known: Iterable[str], custom_allowed: bool) -> list[tuple[str, str]]:
    """``(key, message)`` for each category of `taxonomy` that is not one of `known`: every such key when
    custom categories are not allowed (a judge that only detects `known` ones), else only those close to a known
    name (a custom category one letter off a standard one is a typo, and the standard one keeps its score)."""
    names = list(known)
    found = []
    for key in taxonomy:
        if key in names:
            continue
        hint = did_you_mean(key, names)
        if hint or not custom_allowed:
            found.append((key, f"not a category of this judge{hint}; categories: {', '.join(names)}"))
    return found


class TaxonomyParams(ComponentParams):
    """An error taxonomy: category -> score."""

    taxonomy: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TAXONOMY))
    """Error categories with their scores in [-1, 1]; must include `no_error`."""

    custom_categories: ClassVar[bool] = True
    """Whether the judge can give categories beyond `DEFAULT_TAXONOMY`'s (an LLM can; the rule judge cannot)."""

    def model_post_init(self, context: object) -> None:
        _check_scores(self.taxonomy)

    @model_validator(mode="after")
    def _known_categories(self) -> Self:
        """Each misspelt category is an error at its own key (``taxonomy.<key>``)."""
        errors = [InitErrorDetails(type=PydanticCustomError("unknown_category", message), loc=("taxonomy", key), input=key)
                  for key, message in misspelt_categories(self.taxonomy, DEFAULT_TAXONOMY, self.custom_categories)]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


def score_of(taxonomy: dict[str, float], categories: list[str]) -> float:
    """The worst score among `categories` (`no_error`'s score when there are none)."""
    return min((taxonomy[c] for c in categories), default=taxonomy[NO_ERROR])


CONFIRMATION = re.compile(r"\b(yes|yeah|yep|confirm|confirmed|go ahead|proceed|sure|correct|please do)\b", re.IGNORECASE)


class RuleTaxonomyJudge:
    """Deterministic taxonomy from the episode's own signals, for offline runs and tests.

    Categories: `parse_failure` (a turn whose tool call did not parse), `tool_error` (a tool returned an error),
    `wrong_tool` (a call to a tool the domain does not have), `max_turns_reached`, `premature_stop` (the call
    ended although the task needs database writes and none was made), `unconfirmed_write` (a write tool called
    when the user's last message did not confirm). Categories missing from the taxonomy are ignored.
    """

    class Params(TaxonomyParams):
        custom_categories: ClassVar[bool] = False

    def __init__(self, params: Params | None = None) -> None:
        self.params = params or self.Params()

    def categories(self, episode: JudgeInput) -> list[str]:
        """The categories the signals show, in taxonomy order."""
        result = episode.result
        found: set[str] = set()
        if result.failed_turns:
            found.add("parse_failure")
        if result.tool_errors or result.termination == "too_many_errors":
            found.add("tool_error")
        if result.termination == "max_turns":
            found.add("max_turns_reached")
        known = {function_name(tool) for tool in result.tools}
        last_user = ""
        writes = 0
        for message in result.trajectory:  # tau2's messages: the agent's calls alike in text and native mode
            content = getattr(message, "content", None) or ""
            if message.role == "user" and not getattr(message, "tool_calls", None):
                last_user = content
            if message.role == "assistant":
                for call in message.tool_calls or []:
                    if known and call.name not in known:
                        found.add("wrong_tool")
                    if call.name in episode.write_tools:
                        writes += 1
                        if not CONFIRMATION.search(last_user):
                            found.add("unconfirmed_write")
            if message.role == "tool" and "not found" in content and "Tool" in content:
                found.add("wrong_tool")
        criteria = getattr(episode.task, "evaluation_criteria", None)
        gold_writes = [a for a in (criteria.actions or []) if a.name in episode.write_tools] if criteria else []
        if result.termination in ("user_stop", "agent_stop") and gold_writes and not writes:
            found.add("premature_stop")
        return [name for name in self.params.taxonomy if name in found]

    async def judge(self, episode: JudgeInput) -> Verdict:
        """The rule verdict; never raises."""
        categories = self.categories(episode)
        return Verdict(score_of(self.params.taxonomy, categories), tuple(categories))


class _Answer(BaseModel):
    categories: list[str]
    explanation: str = ""


JUDGE_PROMPT = """You review a conversation between a customer-service agent (assistant) and a customer (user), with
the agent's tool calls and their results. Classify the agent's errors into these categories:
{categories}
Use "{no_error}" alone when the agent made no error.

Answer with one JSON object and nothing else: {{"categories": ["<category>", ...], "explanation": "<one sentence>"}}

Conversation:
{transcript}"""


def function_name(schema: dict[str, object]) -> str:
    """The name of an OpenAI tool schema (``{"type": "function", "function": {"name": ...}}``); "" if it has none."""
    function = schema.get("function")
    return str(function.get("name", "")) if isinstance(function, dict) else ""

def transcript(conversation: list[dict[str, object]]) -> str:
    """A readable transcript of an OpenAI-format conversation (system prompt left out)."""
    lines = []
    for message in conversation:
        if message["role"] == "system":
            continue
        content = str(message.get("content") or "")
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            content += f"\n[tool call] {function.get('name')}({function.get('arguments')})"
        lines.append(f"{message['role']}: {content.strip()}")
    return "\n".join(lines)


class LLMTaxonomyJudge(EndpointJudge):
    """An LLM on an OpenAI-compatible endpoint classifies the agent's errors into the taxonomy; its JSON answer is
    validated, and a failed or malformed call gives no score (no bonus), counted in `judge/failures`."""

    class Params(OpenAIEndpointParams, TaxonomyParams):
        pass

    params: Params

    def prompt(self, episode: JudgeInput) -> str:
        """The classification request for `episode`."""
        categories = "\n".join(f"- {name}" for name in self.params.taxonomy)
        return JUDGE_PROMPT.format(
            categories=categories, no_error=NO_ERROR, transcript=transcript(episode.result.conversation)
        )

    def verdict(self, text: str) -> Verdict:
        """The answer's JSON validated against the taxonomy; a malformed answer is a verdict with `error` set."""
        parsed = next((value for _, _, value in iter_json_objects(text) if isinstance(value, dict)), None)
        try:
            result = _Answer.model_validate(parsed)
        except ValidationError as exc:
            return Verdict(None, error=f"malformed judge answer: {text[:200]!r} ({exc.error_count()} errors)")
        unknown = [c for c in result.categories if c not in self.params.taxonomy]
        if unknown or not result.categories:
            return Verdict(None, error=f"judge answered categories outside the taxonomy: {unknown or 'none'}")
        categories = [c for c in result.categories if c != NO_ERROR] or [NO_ERROR]
        score = score_of(self.params.taxonomy, [c for c in categories if c != NO_ERROR])
        return Verdict(score, tuple(categories), details={"explanation": result.explanation, "raw": json.dumps(parsed)})
