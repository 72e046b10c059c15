"""The spec's training tasks, validation set and named test sets as task rows (`tau_bench_env.data.TaskRow`:
the task by domain, params and id), from the domains the composition root built."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tau_bench_env.data import TaskRow, task_rows

if TYPE_CHECKING:
    from ctu.composition import Components
    from ctu.spec.models import DatasetSource

__all__ = ["TaskRow", "evaluation_rows", "source_rows", "test_rows", "train_rows"]


def source_rows(components: Components, source: DatasetSource, test_set: str | None = None) -> list[TaskRow]:
    """The rows of one data source of the spec, in its domain's task order, at most `max_tasks`."""
    return task_rows(components.domain(source), source.split, source.max_tasks, test_set)


def train_rows(components: Components) -> list[TaskRow]:
    """Every training source's rows, pooled in spec order."""
    return [row for source in components.spec.data.train for row in source_rows(components, source)]


def test_rows(components: Components) -> dict[str, list[TaskRow]]:
    """Each named test set's rows (what `ctu eval` reports)."""
    return {name: source_rows(components, source, name) for name, source in components.spec.data.test_sets.items()}


def evaluation_rows(components: Components) -> dict[str, list[TaskRow]]:
    """The rows of every evaluation during training: the validation set's, then each test set's
    (`Data.evaluation_sets`)."""
    return {name: source_rows(components, source, name)
            for name, source in components.spec.data.evaluation_sets().items()}
