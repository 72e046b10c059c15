"""`scripted`: an offline, deterministic customer for tests and CPU smoke runs (no LLM anywhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from tau2.data_model.message import Message, ToolCall, UserMessage
    from tau2.data_model.tasks import Action, Task
    from tau2.environment.tool import Tool

STOP = "###STOP###"
"""tau2's user stop token (tau2.user.base.STOP)."""


class ScriptedUserSimulator:
    """Offline deterministic customer built from the task's scenario; for tests and CPU smoke runs, not for results.

    It opens with the scenario's reason for the call and known facts; performs the task's own gold user-side
    actions (telecom's device actions) once every gold action before them has happened; answers a question with
    consent ("Yes, please go ahead."); ends the call when asked whether it needs anything else, or after
    `turn_budget` replies. It exists because no LLM is reachable in CI or on a CPU machine: it exercises the
    episode machinery, it does not measure an agent.
    """

    replays_identically = True
    """A replay of an episode meets the same customer (`environment.user_faults.action: retry` draws none other:
    `ctu validate` warns)."""

    class Params(ComponentParams):
        turn_budget: int = Field(10, gt=0)
        """Text replies after which the scripted user ends the call with ###STOP###."""

    def __init__(self, params: Params | None = None) -> None:
        self.params = params or self.Params()

    def session(self, task: Task, user_tools: Sequence[Tool] | None, trajectory: Sequence[Message], *,
                seed: int | None = None) -> ScriptedUserSession:
        """A deterministic session for `task` (see the class docstring); it samples nothing, so `seed` is unused."""
        return ScriptedUserSession(task, trajectory, self.params.turn_budget)


def opening_line(task: Task) -> str:
    """The first thing the customer says: the scenario's reason for calling and what they know."""
    scenario = task.user_scenario
    instructions = scenario.instructions if scenario is not None else None
    if instructions is None:
        return "Hi, I need some help."
    if isinstance(instructions, str):
        return "Hi. " + " ".join(instructions.split())[:400]
    parts = [instructions.reason_for_call, instructions.known_info]
    return "Hi. " + " ".join(" ".join(str(p).split()) for p in parts if p)


def pending_user_actions(task: Task, trajectory: Sequence[Message]) -> list[Action]:
    """The gold user-side actions that are due: the run of ``requestor="user"`` actions starting at the first
    gold action the trajectory has not performed yet (each trajectory tool call satisfies one gold action)."""
    criteria = task.evaluation_criteria
    gold = list(criteria.actions or []) if criteria is not None else []
    performed = [call for message in trajectory for call in (getattr(message, "tool_calls", None) or [])]
    used = [False] * len(performed)
    first_missing = None
    for index, action in enumerate(gold):
        match = next((i for i, call in enumerate(performed) if not used[i] and action.compare_with_tool_call(call)), None)
        if match is None:
            first_missing = index
            break
        used[match] = True
    if first_missing is None:
        return []
    due = []
    for action in gold[first_missing:]:
        if action.requestor != "user":
            break
        due.append(action)
    return due


class ScriptedUserSession:
    """One scripted customer (see `ScriptedUserSimulator`)."""

    def __init__(self, task: Task, trajectory: Sequence[Message], turn_budget: int) -> None:
        self.task = task
        self.trajectory = trajectory
        self.turn_budget = turn_budget
        self.replies = 0
        self.calls = 0

    def _message(self, content: str | None = None, tool_calls: list[ToolCall] | None = None) -> UserMessage:
        from tau2.data_model.message import UserMessage

        return UserMessage(role="user", content=content, tool_calls=tool_calls)

    def _actions(self, actions: list[Action]) -> UserMessage:
        from tau2.data_model.message import ToolCall

        calls = []
        for action in actions:
            self.calls += 1
            calls.append(ToolCall(id=f"user_call_{self.calls}", name=action.name, arguments=dict(action.arguments), requestor="user"))
        return self._message(tool_calls=calls)

    async def reply(self, message: Message) -> UserMessage:
        """The scripted answer to `message`; never raises."""
        if self.replies == 0 and message.role != "tool":
            self.replies += 1
            return self._message(opening_line(self.task))
        due = pending_user_actions(self.task, self.trajectory)
        if due:
            return self._actions(due)
        self.replies += 1
        if message.role == "tool":
            return self._message("I did that on my phone. What should I do next?")
        text = (message.content or "").lower()
        if self.replies > self.turn_budget or "anything else" in text:
            return self._message(STOP)
        if "?" in text or "confirm" in text or "proceed" in text:
            return self._message("Yes, please go ahead.")
        return self._message("Okay, thank you.")
