"""The user-simulator seam: a per-episode session that answers the agent, asynchronously."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tau2.data_model.message import Message, UserMessage
    from tau2.data_model.tasks import Task


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

    def session(self, task: Task, user_tools: Sequence[Any] | None, trajectory: Sequence[Message]) -> UserSession:
        """A session for `task`.

        Args:
            task: the tau2 task (its user scenario drives the user).
            user_tools: tau2 `Tool`s the user may call on their own device (telecom), or None.
            trajectory: the episode's live tau2 message list, read-only (what has happened so far).
        """
        ...
