"""The spec's training tasks and named test sets as generator inputs (prompt and environment extras)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ctu.spec.models import DatasetSource, Spec


@dataclass(frozen=True)
class TaskRow:
    """One task as the generator takes it: a placeholder prompt (the episode builds its own) and the extras
    `TauBenchEnv` reads (``domain``, ``task_id``, ``split``, ``domain_params``, ``test_set``)."""

    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": ""}]


def source_rows(source: DatasetSource, test_set: str | None = None) -> list[TaskRow]:
    """The rows of one dataset source, in tau2's task order, at most `max_tasks`."""
    from tau_bench_env.env import shared_domain

    params = source.domain.params.model_dump(mode="json")
    domain = shared_domain(source.domain.type, json.dumps(params, sort_keys=True))
    tasks = domain.tasks(source.split)
    if source.max_tasks is not None:
        tasks = tasks[: source.max_tasks]
    extras = {"domain": source.domain.type, "split": source.split, "domain_params": params}
    if test_set is not None:
        extras["test_set"] = test_set
    return [TaskRow({**extras, "task_id": task.id}) for task in tasks]


def train_rows(spec: Spec) -> list[TaskRow]:
    """Every training source's rows, pooled in spec order."""
    return [row for source in spec.data.train for row in source_rows(source)]


def test_rows(spec: Spec) -> dict[str, list[TaskRow]]:
    """Each named test set's rows (what `ctu eval` reports)."""
    return {name: source_rows(source, name) for name, source in spec.data.test_sets.items()}


def evaluation_rows(spec: Spec) -> dict[str, list[TaskRow]]:
    """The rows of every evaluation during training: the validation set's, then each test set's
    (`Data.evaluation_sets`)."""
    return {name: source_rows(source, name) for name, source in spec.data.evaluation_sets().items()}
