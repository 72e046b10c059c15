"""The judge seam: a finished episode in, a `Verdict` out. A judge never raises; a failure is a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tau_bench_env.episode import EpisodeResult


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
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeInput:
    """What a judge sees of an episode: its result (conversation, termination, errors), the tau2 task, and the
    domain's write tools."""

    result: EpisodeResult
    task: Any
    write_tools: frozenset[str]


class Judge(Protocol):
    """Classifies the errors of finished episodes."""

    async def judge(self, episode: JudgeInput) -> Verdict:
        """The verdict; never raises."""
        ...
