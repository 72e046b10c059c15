"""Verifying proposed training tasks: what `ctu tasks generate` keeps.

A proposal (`ctu.components.task_generators.base.Proposal`) is kept only when it passes, in order (the first
failure is its rejection reason, `REASONS`):

1. it is a task tau2's `Task` model accepts, with at least one gold action;
2. every gold action names a tool of the domain (the agent's, or the user's for a user action), with arguments
   the tool's JSON schema accepts and none that is a placeholder (``"<order id>"``, ``"John Smith's phone
   number"``, the name of a field instead of its value);
3. it duplicates no task already known (kept earlier, or in the domain's non-test splits): the same gold writes
   once argument order and formatting are normalised (`write_signature`);
4. it overlaps no test task of the domain: the same gold writes, or the same user and intent (the user the gold
   actions act for and the write tools they call: `identity`, `intent`);
5. its gold actions run without a tool error, every write changes the database and at least one does
   (`ctu.tasks.check.replay_gold`);
6. the user the gold actions act for is the user the scenario describes (named by id, email or full name),
   where the domain can tell (a ``users`` table);
7. its gold solution fits ``max_turns``/``max_errors`` and tau2's own evaluation scores its gold replay 1.0
   (`ctu.tasks.check.limit_faults`, `gold_score_fault`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctu.tasks.check import gold_actions_of, gold_score_fault, limit_faults, replay_gold

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tau2.data_model.tasks import Action, Task
    from tau2.environment.environment import Environment

    from ctu.components.task_generators.base import Proposal
    from tau_bench_env.domains import Domain

REASONS: dict[str, str] = {
    "malformed": "the generator's output is not a task (not JSON, not an object)",
    "no_record": "a template slot found no matching record",
    "invalid_task": "tau2's Task model rejects it, or it has no gold action",
    "unknown_tool": "a gold action names a tool the domain does not have",
    "bad_arguments": "a gold action's arguments do not fit the tool's schema",
    "placeholder": "a gold action's argument is a placeholder, not a value",
    "duplicate": "the same gold writes as a task already known",
    "test_overlap": "the same gold writes, or the same user and intent, as a test task",
    "tool_error": "a gold action fails when replayed",
    "no_op_write": "a gold write changes nothing",
    "no_write": "no gold action changes the database",
    "identity_mismatch": "the gold actions act for a user the scenario does not describe",
    "too_long": "the gold solution does not fit max_turns / max_errors",
    "unsolvable": "tau2 scores the gold replay below 1",
}
"""Every rejection reason, in the order they are checked (the first that applies is the one recorded)."""

PLACEHOLDER_VALUE = re.compile(r"^\s*(<.*>|\{.*\}|\[.*\]|\$\w+)\s*$|placeholder|\btbd\b|\.\.\.|\bxxx+\b", re.IGNORECASE)
"""A string argument written as a slot to fill (``<order_id>``, ``{user_id}``, ``$amount``, ``...``)."""


@dataclass(frozen=True)
class Verdict:
    """What `TaskVerifier.verify` decided: the kept task, or why not."""

    task: Task | None
    reason: str | None = None
    """A key of `REASONS`, or None when kept."""
    detail: str = ""


def _normalised(value: object) -> object:
    """`value` with formatting that does not change its meaning removed: strings trimmed, case-folded, inner
    whitespace collapsed; numbers as floats; mapping keys sorted (by `json.dumps`)."""
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(key): _normalised(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(item) for item in value]
    return str(value)


def action_signature(name: str, arguments: Mapping[str, object]) -> str:
    """One action as a canonical string: its tool and normalised arguments in key order."""
    return name + json.dumps(_normalised(arguments), sort_keys=True)


def write_signature(task: Task, write_tools: frozenset[str]) -> tuple[str, ...]:
    """The sorted signatures of `task`'s assistant gold actions that call write tools (all its assistant actions
    when none does): two tasks with the same signature ask for the same change."""
    actions = [a for a in gold_actions_of(task) if a.requestor == "assistant"]
    writes = [a for a in actions if a.name in write_tools] or actions
    return tuple(sorted(action_signature(a.name, dict(a.arguments)) for a in writes))


def intent(task: Task, write_tools: frozenset[str]) -> tuple[str, ...]:
    """The write tools `task`'s gold actions call, sorted (with repeats): what the user wants done."""
    return tuple(sorted(a.name for a in gold_actions_of(task) if a.requestor == "assistant" and a.name in write_tools))


def identity(task: Task, responses: list[str], environment: Environment) -> frozenset[str]:
    """The users `task`'s gold actions act for, where the domain's database has a ``users`` table: every
    ``user_id`` argument, every response that is a JSON object with a ``user_id``, and every response that is a
    user id itself (a lookup such as retail's ``find_user_id_by_email``); empty where the domain cannot tell."""
    users = _users_table(environment)
    if users is None:
        return frozenset()
    found = set()
    for action, response in zip(gold_actions_of(task), responses, strict=False):
        if isinstance(action.arguments.get("user_id"), str):
            found.add(action.arguments["user_id"])
        text = response.strip()
        if text in users:
            found.add(text)
            continue
        try:
            decoded = json.loads(text)
        except ValueError:
            continue
        if isinstance(decoded, dict) and isinstance(decoded.get("user_id"), str):
            found.add(decoded["user_id"])
    return frozenset(found)


def _users_table(environment: Environment) -> Mapping[str, object] | None:
    database = getattr(getattr(environment, "tools", None), "db", None)
    users = getattr(database, "users", None)
    return users if users is not None and hasattr(users, "__contains__") else None


def _user_names(record: Any) -> list[list[str]]:
    """The ways a scenario can name a user: [[id], [email], [first, last]] from their record."""
    data = record.model_dump(mode="json") if hasattr(record, "model_dump") else dict(record)
    ways = [[str(data["user_id"])]] if "user_id" in data else []
    if isinstance(data.get("email"), str):
        ways.append([data["email"]])
    name = data.get("name")
    if isinstance(name, str):
        ways.append(name.split())
    elif isinstance(name, dict):
        ways.append([str(part) for part in (name.get("first_name"), name.get("last_name")) if part])
    return [way for way in ways if way]


def scenario_text(task: Task) -> str:
    """Everything the user simulator is told of the task, lower-cased: the scenario's persona and instructions
    and the ticket."""
    scenario = task.user_scenario.model_dump(mode="json") if task.user_scenario else {}
    return (json.dumps(scenario) + " " + (task.ticket or "")).lower()


class TaskVerifier:
    """Verifies proposals for one domain (see the module docstring).

    Args:
        domain: the domain, built.
        max_turns, max_errors: the episode limits the tasks must fit (the spec's `environment`).
        test_tasks: the domain's test tasks no training task may overlap.
        known_tasks: tasks a proposal must not duplicate besides those kept (e.g. the domain's training split).
    """

    def __init__(self, domain: Domain, max_turns: int, max_errors: int, test_tasks: list[Task],
                 known_tasks: Sequence[Task] = ()) -> None:
        self.domain = domain
        self.max_turns = max_turns
        self.max_errors = max_errors
        writes = domain.write_tools
        self.seen: dict[tuple[str, ...], str] = {write_signature(t, writes): str(t.id) for t in known_tasks}
        self.test_writes = {write_signature(t, writes): str(t.id) for t in test_tasks}
        self.test_intents: dict[tuple[frozenset[str], tuple[str, ...]], str] = {}
        for task in test_tasks:
            replay = replay_gold(domain, task)
            who = identity(task, replay.responses, replay.environment)
            if who and intent(task, writes):
                self.test_intents.setdefault((who, intent(task, writes)), str(task.id))
        functions: list[dict[str, Any]] = [schema["function"] for schema in domain.tool_schemas]  # type: ignore[misc]
        self.schemas = {function["name"]: function.get("parameters", {}) for function in functions}
        self.user_schemas = {tool.name: tool.openai_schema["function"].get("parameters", {})
                             for tool in domain.user_tools or []}

    def remember(self, task: Task) -> None:
        """Count `task` as known: a later proposal with its gold writes is a duplicate."""
        self.seen.setdefault(write_signature(task, self.domain.write_tools), str(task.id))

    async def verify(self, proposal: Proposal, task_id: str) -> Verdict:
        """The verdict on `proposal`, given the id `task_id` when kept (the kept task is `remember`ed)."""
        if proposal.task is None:
            return Verdict(None, proposal.rejection or "malformed", proposal.detail)
        verdict = await self._verify(proposal.task, task_id)
        if verdict.task is not None:
            self.remember(verdict.task)
        return verdict

    async def _verify(self, raw: dict[str, Any], task_id: str) -> Verdict:
        import pydantic
        from tau2.data_model.tasks import Task

        try:
            task = Task.model_validate({**raw, "id": task_id})
        except (pydantic.ValidationError, TypeError) as error:
            return Verdict(None, "invalid_task", " ".join(str(error).split())[:300])
        actions = gold_actions_of(task)
        if not actions:
            return Verdict(None, "invalid_task", "no gold action")
        for problem in (self._tool_problem(action) for action in actions):
            if problem is not None:
                return Verdict(None, *problem)
        writes = self.domain.write_tools
        signature = write_signature(task, writes)
        if signature in self.seen:
            return Verdict(None, "duplicate", f"the same gold writes as task {self.seen[signature]}")
        if signature in self.test_writes:
            return Verdict(None, "test_overlap", f"the same gold writes as test task {self.test_writes[signature]}")
        replay = replay_gold(self.domain, task)
        if replay.failed:
            return Verdict(None, "tool_error", replay.faults(task)[0])
        if replay.no_op_writes:
            return Verdict(None, "no_op_write", replay.faults(task)[0])
        if not replay.writes:
            return Verdict(None, "no_write", "no gold action changes the database: nothing to check an episode by")
        who = identity(task, replay.responses, replay.environment)
        mismatch = self._identity_problem(task, who, replay.environment)
        if mismatch is not None:
            return Verdict(None, "identity_mismatch", mismatch)
        key = (who, intent(task, writes))
        if who and key in self.test_intents:
            return Verdict(None, "test_overlap", f"the same user ({', '.join(sorted(who))}) and intent "
                                                 f"({', '.join(key[1])}) as test task {self.test_intents[key]}")
        from tau_bench_env.gold_limits import gold_solution

        solution = gold_solution(self.domain, task)
        limits = limit_faults(solution, self.max_turns, self.max_errors)
        if limits:
            return Verdict(None, "too_long", limits[0])
        unsolved = await gold_score_fault(self.domain, task, solution, self.max_turns, self.max_errors)
        if unsolved is not None:
            return Verdict(None, "unsolvable", unsolved)
        return Verdict(task)

    def _tool_problem(self, action: Action) -> tuple[str, str] | None:
        """``(reason, detail)`` of the first problem of one gold action's tool and arguments, or None."""
        from jsonschema import Draft202012Validator

        schemas = self.user_schemas if action.requestor == "user" else self.schemas
        if action.name not in schemas:
            from ctu.errors import closest

            whose = "the user's" if action.requestor == "user" else "the agent's"
            near = closest(action.name, schemas, n=1)
            nearest = f"nearest {near[0]!r}; " if near else ""
            return "unknown_tool", f"{action.name!r} is not one of {whose} tools ({nearest}{', '.join(sorted(schemas)) or 'none'})"
        arguments = dict(action.arguments)
        error = next(iter(Draft202012Validator(schemas[action.name]).iter_errors(arguments)), None)
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path) or "arguments"
            return "bad_arguments", f"{action.name} {where}: {error.message[:200]}"
        for name, value in arguments.items():
            if isinstance(value, str) and _is_placeholder(name, value):
                return "placeholder", f"{action.name} {name}={value!r} is a placeholder, not a value"
        return None

    def _identity_problem(self, task: Task, who: frozenset[str], environment: Environment) -> str | None:
        users = _users_table(environment)
        if not who or users is None:
            return None
        text = scenario_text(task)
        for user_id in sorted(who):
            record = users.get(user_id)
            if record is None:
                return f"the gold actions act for user {user_id!r}, whom the database does not hold"
            ways = _user_names(record)
            if not any(all(part.lower() in text for part in way) for way in ways):
                named = " / ".join(" ".join(way) for way in ways)
                return f"the gold actions act for user {user_id} ({named}), whom the scenario never names"
        return None


def _is_placeholder(name: str, value: str) -> bool:
    """Whether a string argument reads as a slot to fill rather than a value: written as one (`PLACEHOLDER_VALUE`),
    or naming its own parameter (``"phone_number": "John Smith's phone number"``, ``"amount": "the amount"``)."""
    if PLACEHOLDER_VALUE.search(value):
        return True
    words = set(re.findall(r"[a-z0-9]+", value.lower()))
    parts = [part for part in name.lower().split("_") if part]
    return bool(parts) and len(value.split()) > 1 and all(part in words for part in parts)
