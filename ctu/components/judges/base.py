"""The judge seam: a finished episode in, a `Verdict` out. A judge never raises; a failure is a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ctu.components.endpoint import ChatEndpoint, EndpointError, OpenAIEndpointParams
from ctu.registry import registry
from tau_bench_env.outcome import EpisodeResult

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task


@dataclass(frozen=True)
class Verdict:
    """A judge's classification of a finished episode.

    Attributes:
        score: in [-1, 1], None on failure. The taxonomy judges give the worst category's score (`no_error`'s
            when nothing went wrong); `mast` gives 1 / failures (1 with none).
        categories: the error categories (or MAST failure-mode codes) found.
        error: why the judge gave no score (a failed or malformed call), else None.
    """

    score: float | None
    categories: tuple[str, ...] = ()
    error: str | None = None
    details: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeInput:
    """What a judge sees of an episode: its result (conversation, termination, errors), the tau2 task, and the
    domain's write tools."""

    result: EpisodeResult
    task: Task
    write_tools: frozenset[str]


class Judge(Protocol):
    """Classifies the errors of finished episodes."""

    async def judge(self, episode: JudgeInput) -> Verdict:
        """The verdict; never raises."""
        ...


class EndpointJudge:
    """Base of the LLM judges on an OpenAI-compatible endpoint: `judge` sends `prompt(episode)` as one user
    message and reads the answer's text with `verdict`; a call that fails after the endpoint's retries is a
    verdict with `error` set, never an exception. A subclass writes `prompt` and `verdict`."""

    def __init__(self, params: OpenAIEndpointParams) -> None:
        self.params = params
        self.endpoint = ChatEndpoint(params)

    def prompt(self, episode: JudgeInput) -> str:
        """The request for `episode`."""
        raise NotImplementedError

    def verdict(self, text: str) -> Verdict:
        """The verdict of the judge's answer `text`; a malformed one is a verdict with `error` set."""
        raise NotImplementedError

    async def judge(self, episode: JudgeInput) -> Verdict:
        """The verdict on `episode`; never raises."""
        try:
            answer = await self.endpoint.complete([{"role": "user", "content": self.prompt(episode)}])
        except EndpointError as exc:
            return Verdict(None, error=str(exc))
        return self.verdict(answer.content or "")


registry.judges.declare_contract(Judge)
