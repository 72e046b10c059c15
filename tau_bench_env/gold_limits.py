"""How many policy turns and errors each built-in task's gold solution takes, so `ctu validate` can warn about a
task the spec's `max_turns` or `max_errors` makes unsolvable without loading tau2.

A gold solution is the gold replay (`tau_bench_env.replay.GoldReplayAgent`): one gold tool call a turn, one turn
asking the user to act for each run of gold user actions, and the closing turn. Its errors are the gold actions
(the agent's and the user's) whose tool result is an error, which count against `max_errors` as the agent's and
the user's tool errors do. Airline task 44 takes 21 turns, one more than the default `max_turns: 20`; a policy
making several calls in one turn needs fewer, so the check warns rather than rejects.

`gold_limits.json.gz` beside this module holds, per built-in domain with its default params, each task's
``[turns, errors]`` and each split's task ids in order. `tests/env/test_gold_limits.py` compares it with the
installed tau2; ``python -m tau_bench_env.gold_limits`` rewrites it (about 35 s).
"""

from __future__ import annotations

import gzip
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from tau_bench_env.domains import Domain

LIMITS_FILE = Path(__file__).with_name("gold_limits.json.gz")
DOMAINS = ("retail", "airline", "telecom", "mock")
"""The domains the file covers (tau2's, with their default params)."""


class DomainLimits(TypedDict):
    """One domain's entry of the limits file."""

    tasks: dict[str, list[int]]
    """task id -> ``[turns, errors]`` its gold solution needs."""
    splits: dict[str, list[str]]
    """split -> its task ids, in tau2's order."""


@lru_cache(maxsize=1)
def gold_limits() -> dict[str, DomainLimits]:
    """The file's content: ``{domain: {"tasks": {task_id: [turns, errors]}, "splits": {split: [task_id, ...]}}}``."""
    return json.loads(gzip.decompress(LIMITS_FILE.read_bytes()))


def gold_needs(domain: str, split: str, max_tasks: int | None = None) -> list[tuple[str, int, int]] | None:
    """``(task_id, turns, errors)`` of the tasks a data source uses (the first `max_tasks` of `split`, in tau2's
    order; a union ``a+b`` as `Domain.tasks` joins it), or None when the file does not cover that domain and split."""
    data = gold_limits().get(domain)
    parts = split.split("+")
    if data is None or any(part not in data["splits"] for part in parts):
        return None
    ids = list(dict.fromkeys(task_id for part in parts for task_id in data["splits"][part]))[:max_tasks]
    return [(task_id, *_turns_errors(data["tasks"][task_id])) for task_id in ids]


def _turns_errors(limits: list[int]) -> tuple[int, int]:
    turns, errors = limits
    return turns, errors


def gold_solution(domain: Domain, task: Task) -> tuple[int, int]:
    """``(turns, errors)`` of `task`'s gold solution in `domain` (a `tau_bench_env.domains.Domain`), computed by
    running its gold actions in a fresh environment with the task's initial state (imports tau2)."""
    from tau2.data_model.message import ToolCall

    from tau_bench_env.replay import GoldReplayAgent

    turns = len(list(GoldReplayAgent(task).turns()))
    environment = domain.episode_environment(task)  # copy-on-access: tau2's responses, without loading its database
    state = task.initial_state
    if state is not None:
        environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
    criteria = task.evaluation_criteria
    errors = 0
    for index, action in enumerate(criteria.actions or [] if criteria else []):
        call = ToolCall(id=f"gold_{index}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor)
        errors += bool(environment.get_response(call).error)
    return turns, errors


def live_gold_limits(domains: tuple[str, ...] = DOMAINS) -> dict[str, object]:
    """What `gold_limits` holds, computed from the installed tau2 for `domains` (slow: every task's gold run)."""
    from tau_bench_env.env import shared_domain

    limits: dict[str, object] = {}
    for name in domains:
        domain = shared_domain(name)
        tasks: dict[str, list[int]] = {}
        splits: dict[str, list[str]] = {}
        for split in domain.splits:
            splits[split] = [task.id for task in domain.tasks(split)]
            for task in domain.tasks(split):
                if task.id not in tasks:
                    tasks[task.id] = list(gold_solution(domain, task))
        limits[name] = {"tasks": tasks, "splits": splits}
    return limits


if __name__ == "__main__":
    LIMITS_FILE.write_bytes(gzip.compress(json.dumps(live_gold_limits(), separators=(",", ":")).encode(), 9, mtime=0))
    print(f"wrote {LIMITS_FILE}", file=sys.stderr)
