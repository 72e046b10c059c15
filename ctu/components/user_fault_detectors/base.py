"""The user-fault seam: what a detector is handed (`FinishedEpisode`) and what it answers (a `UserFault`, or None).

A simulated customer's mistake is not the policy's failure: tau2-bench's maintainers measured up to 30% of failed
retail trajectories failing because of the user simulator (tau2-bench PR #392). A detector looks at a finished
episode and says whether the customer, not the agent, broke it; the spec's `environment.user_faults.action` then
decides what happens to the episode (`ctu.rollout.generator.TauGenerator.run_episode`). A detector of one's own implements `UserFaultDetector`
and registers with ``@registry.user_fault_detectors.register("name")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ctu.registry import ComponentParams, registry

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.data_model.tasks import Task


@dataclass(frozen=True)
class FinishedEpisode:
    """One finished episode, as tau2 records it.

    Attributes:
        domain: the domain's name.
        task: the tau2 task (its scenario, its gold actions).
        messages: the episode's tau2 messages in order (user, assistant with tool calls, tool results).
        termination: how it ended (``user_stop``, ``agent_stop``, ``max_turns``... ; `tau_bench_env.outcome.Termination`).
        write_tools: the names of the domain's tools that change its database.
        user_tools: the names of the tools the customer has (telecom's phone), none in most domains.
    """

    domain: str
    task: Task
    messages: Sequence[Message]
    termination: str | None
    write_tools: frozenset[str]
    user_tools: frozenset[str] = frozenset()


@dataclass(frozen=True)
class UserFault:
    """A fault of the user simulator: the detector's registered name (`kind`) and one line saying what it saw.
    ``str()`` gives ``"<kind>: <reason>"``, the line trajectory files and infrastructure errors show."""

    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


class UserFaultDetector(Protocol):
    """A built user-fault detector (the `user_fault_detectors` kind's contract)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """Why the user simulator broke `episode` (one line), or None when it did not; never raises (an endpoint
        that stays down is a None, not an exception)."""
        ...


class Detector:
    """Base of a detector: built as ``cls(params)`` like every component (its `Params`, when it declares one;
    none for a rule without settings); a subclass writes `detect`."""

    def __init__(self, params: ComponentParams | None = None) -> None:
        self.params = params

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """Why the user simulator broke `episode` (one line), or None when it did not; never raises."""
        raise NotImplementedError


@dataclass(frozen=True)
class UserFaultPolicy:
    """The spec's `environment.user_faults`, built: the detectors by registered name, and what a fault does.

    Attributes:
        detectors: ``(name, detector)`` pairs, run in order; the first fault found is the episode's.
        action: ``exclude`` (an infrastructure error), ``retry`` (played again, then excluded) or ``keep`` (flagged,
            scored as tau2 scores it).
        max_retries: with ``retry``, the replays before the episode is excluded.
    """

    detectors: tuple[tuple[str, UserFaultDetector], ...] = ()
    action: str = "exclude"
    max_retries: int = 2

    async def check(self, episode: FinishedEpisode) -> UserFault | None:
        """The first fault a detector finds in `episode`, or None. A detector that raises finds nothing (its
        contract says it never raises; a user's own may)."""
        for name, detector in self.detectors:
            try:
                reason = await detector.detect(episode)
            except Exception as error:  # a broken detector must not end a run
                reason = None
                import logging

                logging.getLogger(__name__).warning("user-fault detector %s failed: %s", name, error)
            if reason:
                return UserFault(name, reason)
        return None


registry.user_fault_detectors.declare_contract(UserFaultDetector)
