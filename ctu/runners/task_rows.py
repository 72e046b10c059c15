"""The spec's training tasks, validation set and named test sets as task rows (`tau_bench_env.data.TaskRow`:
the task by domain, params and id), from the domains the composition root built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tau_bench_env.data import TaskRow, task_rows

if TYPE_CHECKING:
    from ctu.composition import Components
    from ctu.spec.models import DatasetSource

__all__ = ["TaskRow", "evaluation_rows", "held_out_copies", "source_rows", "test_rows", "train_rows"]


def source_rows(components: Components, source: DatasetSource, test_set: str | None = None) -> list[TaskRow]:
    """The rows of one data source of the spec, in its domain's task order, at most `max_tasks`."""
    return task_rows(components.domain(source), source.split, source.max_tasks, test_set)


def train_rows(components: Components) -> list[TaskRow]:
    """Every training source's rows, pooled in spec order."""
    return [row for source in components.spec.data.train for row in source_rows(components, source)]


def held_out_scenarios(components: Components) -> dict[str, str]:
    """Each held-out task's scenario (`tau_bench_env.task_content.scenario_digest`: its customer and starting
    database) -> ``domain/id``: the tasks of the spec's validation and test sets, and of the held-out splits
    (`ctu.spec.held_out.HELD_OUT_SPLITS`) of its training domains."""
    from ctu.spec.held_out import HELD_OUT_SPLITS
    from tau_bench_env.task_content import scenario_digest

    spec = components.spec
    held: dict[str, str] = {}
    for name, source in spec.data.evaluation_sets().items():
        domain = components.domain(source)
        for row in source_rows(components, source, name):
            held.setdefault(scenario_digest(domain.task(row.task_id)), f"{source.domain.type}/{row.task_id}")
    for source in spec.data.train:
        domain = components.domain(source)
        for split in (split for split in HELD_OUT_SPLITS if split in domain.splits):
            held.update({scenario_digest(task): f"{source.domain.type}/{task.id}" for task in domain.tasks(split)})
    return held


def held_out_copies(components: Components, scenarios: Mapping[str, str] | None = None,
                    held: Mapping[str, str] | None = None) -> list[str]:
    """Each task that is a held-out task in content under another id (`held`, default `held_out_scenarios`), as
    ``domain/id (held-out domain/id)``: of the spec's training tasks, or of `scenarios` (``domain/id`` -> scenario
    digest, e.g. the tasks an evaluation folder recorded) when given. A held-out task by id is `ctu validate`'s
    (`ctu.spec.held_out`); none of tau2's own train tasks shares a test task's scenario."""
    from tau_bench_env.task_content import scenario_digest

    held = held_out_scenarios(components) if held is None else held
    if scenarios is None:
        scenarios = {f"{source.domain.type}/{row.task_id}": scenario_digest(components.domain(source).task(row.task_id))
                     for source in components.spec.data.train for row in source_rows(components, source)}
    found = [f"{key} (held-out {copy_of})" for key, digest in scenarios.items()
             if (copy_of := held.get(digest)) is not None and copy_of != key]
    return list(dict.fromkeys(found))


def test_rows(components: Components) -> dict[str, list[TaskRow]]:
    """Each named test set's rows (what `ctu eval` reports)."""
    return {name: source_rows(components, source, name) for name, source in components.spec.data.test_sets.items()}


def evaluation_rows(components: Components) -> dict[str, list[TaskRow]]:
    """The rows of every evaluation during training: the validation set's, then each test set's
    (`Data.evaluation_sets`)."""
    return {name: source_rows(components, source, name)
            for name, source in components.spec.data.evaluation_sets().items()}
