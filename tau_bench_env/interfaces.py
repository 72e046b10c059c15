"""What the environment needs from the agent side, declared here so `tau_bench_env` depends on no trainer.

A policy turn reaches an episode as text (read by a `Parser`) or already parsed (`ParsedTurn`, native tool
calling); the customer is played by a `UserSimulator`. ctu's parsers and user simulators satisfy these
protocols (`ctu.components.parsers`, `ctu.components.user_simulators` re-export them); any other object with
the same methods does too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tau2.data_model.message import Message, UserMessage
    from tau2.data_model.tasks import Task
    from tau2.environment.tool import Tool


@dataclass(frozen=True)
class ToolCall:
    """One tool call: the tool's `name` and its `arguments` as a JSON object."""

    name: str
    arguments: dict[str, object]


@dataclass(frozen=True)
class ParsedTurn:
    """One parsed policy turn.

    Attributes:
        content: the text outside tool calls, stripped (what the user sees when there are no tool calls).
        tool_calls: the well-formed tool calls, in order.
        parse_errors: one message per span that looked like a tool call but could not be parsed; a turn with
            any is a parse failure, counted in `reward/parse_failure_rate`.
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    parse_errors: tuple[str, ...] = field(default=())

    @property
    def is_parse_failure(self) -> bool:
        """True when some span looked like a tool call and could not be parsed."""
        return bool(self.parse_errors)


class Parser(Protocol):
    """Turns one turn of policy text into a `ParsedTurn`; must not raise on any input string.

    A parser may also offer ``write(turn: ParsedTurn) -> str``, the text it reads back as `turn` (its inverse:
    ``parse(write(turn))`` is `turn`), with which `ctu data sft` writes gold turns as the policy would in text
    mode; every built-in parser does."""

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn of policy text."""
        ...

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """System-prompt text presenting `tools` (OpenAI schemas) and this parser's call format (text mode)."""
        ...


class UserSimulatorError(Exception):
    """The simulated user could not answer (its endpoint failed after every retry, or answered nonsense).

    An episode that meets it ends with termination reason ``user_error`` and reward 0; it is never raised
    into the trainer.
    """


class UserSession(Protocol):
    """One episode's simulated user."""

    async def reply(self, message: Message) -> UserMessage:
        """Answer `message`: the agent's text (the first is tau2's greeting) or the results of the user's own
        tool calls. Returns a tau2 `UserMessage` with text or with tool calls (``requestor="user"``).

        Raises:
            UserSimulatorError: no usable answer could be had.
        """
        ...


class UserSimulator(Protocol):
    """Makes sessions; one simulator object serves every episode of a run."""

    def session(self, task: Task, user_tools: Sequence[Tool] | None, trajectory: Sequence[Message], *,
                seed: int | None = None) -> UserSession:
        """A session for `task`.

        Args:
            task: the tau2 task (its user scenario drives the user).
            user_tools: tau2 `Tool`s the user may call on their own device (telecom), or None.
            trajectory: the episode's live tau2 message list, read-only (what has happened so far).
            seed: the seed the user samples with, or None for unseeded sampling. Evaluation gives each sample of a
                task a seed of its own, and an episode played again for a user fault another (as tau2 seeds its
                user with each trial's seed, `tau2.orchestrator.Orchestrator`); a user that samples sends it with
                its requests, a deterministic one ignores it.
        """
        ...
