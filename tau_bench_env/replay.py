"""A scripted agent that replays a task's gold actions, optionally corrupted: for tests, parity suites and
benchmarks of the environment (it never trains anything).

With the `scripted` user, a faithful replay finishes every tau2 retail, airline and telecom task with reward 1:
the agent makes each gold assistant-side tool call in order, asks the user to act when the next gold action is
the user's (telecom), and ends by stating every piece of information the task requires it to communicate and
asking whether the user needs anything else (the scripted user then stops).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from tau_bench_env.interfaces import ParsedTurn, ToolCall

if TYPE_CHECKING:
    from tau2.data_model.tasks import Action, Task
    from tau2.environment.environment import Environment

    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeResult

ASK_USER = "Please do the next step on your phone and tell me when it is done."
CLOSING = "Is there anything else I can help you with?"
FAKE_PAYMENT_ID = "credit_card_0000000"


class Corruption(str, Enum):
    """Ways to spoil a replay so that tau2 scores it 0 (each applies only where the task allows it).

    The write corruptions target the gold actions that change the agent's database (`effective_writes`): a
    gold write that fails in tau2's own gold run changes nothing, so spoiling it would change nothing either.
    """

    WRONG_ARGUMENT = "wrong_argument"
    """Change the first string or number argument of the last effective write."""
    MISSING_ACTION = "missing_action"
    """Leave out the last effective write."""
    FAKE_PAYMENT = "fake_payment"
    """Replace the `payment_method_id` of every effective write by a payment method that does not exist."""
    MISSING_INFO = "missing_info"
    """Say nothing of the information the task requires the agent to communicate."""


def _spoil(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    return value


def effective_writes(environment: Environment, task: Task) -> tuple[int, ...]:
    """Indices of the task's gold actions that change the agent's database when the gold actions are run in
    order in `environment` (a fresh environment of the task's domain, before the task's initial state is
    applied: `Domain.episode_environment(task)` or tau2's own `make_environment()`).

    Over a copy-on-access database (`tau_bench_env.overlay`) a change is seen through the records the actions
    touched (`DatabaseState.matches`, equal exactly when tau2's hashes are); over any other, by tau2's
    `get_db_hash`, which serialises the whole database (~0.1 s an action on retail's)."""
    from tau2.data_model.message import ToolCall as Tau2ToolCall

    criteria = task.evaluation_criteria
    state = task.initial_state
    if state is not None:
        environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
    changed = []
    for index, action in enumerate(criteria.actions or [] if criteria else []):
        changed_since = _change_check(environment)
        call = Tau2ToolCall(id=f"gold_{index}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor)
        environment.get_response(call)
        if action.requestor == "assistant" and changed_since():
            changed.append(index)
    return tuple(changed)


def _change_check(environment: Environment) -> Callable[[], bool]:
    """A check of whether the agent's database in `environment` has changed since this call."""
    from tau_bench_env.overlay import OverlayDatabase

    database = environment.tools.db if environment.tools is not None else None
    if isinstance(database, OverlayDatabase):
        overlay, state = database, database.state()
        return lambda: not state.matches(overlay)
    digest = environment.get_db_hash()
    return lambda: environment.get_db_hash() != digest


def applicable(task: Task, corruption: Corruption, writes: tuple[int, ...]) -> bool:
    """Whether `corruption` changes anything for `task`, given its `effective_writes`."""
    criteria = task.evaluation_criteria
    actions = list(criteria.actions or []) if criteria else []
    if corruption is Corruption.MISSING_ACTION:
        return bool(writes)
    if corruption is Corruption.WRONG_ARGUMENT:
        return bool(writes) and any(isinstance(v, (str, int, float)) for v in actions[writes[-1]].arguments.values())
    if corruption is Corruption.FAKE_PAYMENT:
        return any("payment_method_id" in actions[i].arguments for i in writes)
    return bool(criteria and criteria.communicate_info)


def gold_actions(task: Task, corruption: Corruption | None = None, writes: tuple[int, ...] = ()) -> list[Action]:
    """The task's gold actions (copies), with `corruption` applied to its `effective_writes` `writes`."""
    criteria = task.evaluation_criteria
    actions = [a.model_copy(deep=True) for a in (criteria.actions or [])] if criteria else []
    if corruption is Corruption.MISSING_ACTION and writes:
        del actions[writes[-1]]
    elif corruption is Corruption.WRONG_ARGUMENT and writes:
        arguments = actions[writes[-1]].arguments
        keys = [k for k, v in arguments.items() if isinstance(v, (str, int, float))]
        if keys:
            arguments[keys[0]] = _spoil(arguments[keys[0]])
    elif corruption is Corruption.FAKE_PAYMENT:
        for index in writes:
            if "payment_method_id" in actions[index].arguments:
                actions[index].arguments["payment_method_id"] = FAKE_PAYMENT_ID
    return actions


@dataclass
class GoldReplayAgent:
    """Produces the policy turns of a gold replay of `task` (see the module docstring)."""

    task: Task
    corruption: Corruption | None = None
    writes: tuple[int, ...] = ()
    """The task's `effective_writes`, which the write corruptions target."""
    actions: list[Action] | None = None
    """Actions to replay instead of the (corrupted) gold ones, e.g. a reordered or repeated variant."""

    def turns(self) -> Iterator[ParsedTurn]:
        """The turns, in order; the last is the closing message."""
        actions = self.actions if self.actions is not None else gold_actions(self.task, self.corruption, self.writes)
        index = 0
        while index < len(actions):
            action = actions[index]
            if action.requestor == "user":
                while index < len(actions) and actions[index].requestor == "user":
                    index += 1
                yield ParsedTurn(content=ASK_USER)
                continue
            yield ParsedTurn(content="", tool_calls=(ToolCall(action.name, dict(action.arguments)),))
            index += 1
        criteria = self.task.evaluation_criteria
        info = list(criteria.communicate_info or []) if criteria else []
        if self.corruption is Corruption.MISSING_INFO:
            info = []
        summary = " ".join(f"{item}." for item in info)
        yield ParsedTurn(content=f"{summary} {CLOSING}".strip())


async def play(episode: Episode, agent: GoldReplayAgent) -> EpisodeResult:
    """Reset `episode` and play `agent`'s turns until the episode ends (further turns repeat the closing).

    Returns:
        The episode's `EpisodeResult`.
    """
    await episode.reset()
    turns = agent.turns()
    last = ParsedTurn(content=CLOSING)
    while not episode.done:
        turn = next(turns, last)
        await episode.step(turn)
    return episode.result()
