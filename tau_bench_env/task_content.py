"""What a task is, apart from its id and its evaluation criteria: the customer and what they want (tau2's
``user_scenario``) and the database it starts from (``initial_state``). Two tasks of equal scenario are the same
task for every purpose that must not mix tasks: re-scoring saved episodes against a revised task file (only the
evaluation criteria may change), holding a test task out of training whatever its id.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task


def scenario(task: Task) -> dict[str, object]:
    """A task's scenario as JSON-able data: ``{"user_scenario": ..., "initial_state": ...}`` (None when it has
    none)."""
    return {"user_scenario": task.user_scenario.model_dump(mode="json"),
            "initial_state": task.initial_state.model_dump(mode="json") if task.initial_state else None}


def scenario_digest(task: Task) -> str:
    """The SHA-256 (hex) of a task's `scenario`, its keys sorted: equal for tasks of one scenario, whatever their id
    or evaluation criteria."""
    return hashlib.sha256(json.dumps(scenario(task), sort_keys=True).encode()).hexdigest()
