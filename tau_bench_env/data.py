"""Task rows (`TaskRow`, the one row type of both backends). The files a trainer
reads them from are its backend's business (SkyRL's parquet layout: `ctu.backends.skyrl.datasets`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from tau_bench_env.domain_keys import DomainKey, domain_key, key_of
from tau_bench_env.domains import Domain


@dataclass(frozen=True)
class TaskRow:
    """One task as a run takes it, the one row type of both backends: the task by domain, its params and id, with
    the split it was drawn from and, for an evaluation set's rows, the set's name. The Tinker runner and `ctu eval`
    hand rows to the rollout (`ctu.rollout.requests.EpisodeRequest`), the skyrl backend writes them to parquet
    (`parquet_rows`) and reads them back from SkyRL's ``env_extras`` (`from_extras`).

    Attributes:
        domain: a registered domain's name.
        task_id: the task's id in that domain.
        split: the split the task was drawn from.
        domain_params: the domain's params that differ from their defaults (JSON-able; `key` finds the domain).
        test_set: the evaluation set the row belongs to, None for a training row.
        data_source: SkyRL's ``data_source`` column (the evaluation set, or the domain), when the row came from one.
    """

    domain: str
    task_id: str
    split: str = "base"
    domain_params: Mapping[str, object] = field(default_factory=dict)
    test_set: str | None = None
    data_source: str | None = None

    @property
    def key(self) -> DomainKey:
        """The key of the row's domain with its params (`tau_bench_env.domain_keys.domain_key`)."""
        return domain_key(self.domain, self.domain_params)

    @property
    def prompt(self) -> list[dict[str, object]]:
        """A placeholder prompt: the episode writes its own."""
        return [{"role": "system", "content": ""}]

    @property
    def extras(self) -> dict[str, object]:
        """The row as the flat mapping trajectory records and logs keep (``domain``, ``task_id``, ``split``,
        ``domain_params``, and ``test_set`` / ``data_source`` when set)."""
        extras: dict[str, object] = {"domain": self.domain, "task_id": self.task_id, "split": self.split,
                                     "domain_params": dict(self.domain_params)}
        if self.test_set is not None:
            extras["test_set"] = self.test_set
        if self.data_source is not None:
            extras["data_source"] = self.data_source
        return extras

    @classmethod
    def from_extras(cls, extras: Mapping[str, object]) -> TaskRow:
        """The row of a flat mapping: SkyRL's ``env_extras`` of a parquet row (its ``extra_info`` nested mapping
        merged in, ``domain_params`` as JSON), or `extras` of a row.

        Raises:
            KeyError: no ``domain`` or no ``task_id``.
        """
        nested = extras.get("extra_info")
        flat = {**(nested if isinstance(nested, Mapping) else {}), **extras}
        if "domain" not in flat or "task_id" not in flat:
            raise KeyError("a task row needs `domain` and `task_id` (see `ctu data prepare`)")
        params = flat.get("domain_params")
        mapping = json.loads(params) if isinstance(params, str) else dict(params) if isinstance(params, Mapping) else {}
        test_set, source = flat.get("test_set"), flat.get("data_source")
        return cls(str(flat["domain"]), str(flat["task_id"]), str(flat.get("split") or "base"), mapping,
                   None if test_set is None else str(test_set), None if source is None else str(source))


def task_rows(domain: Domain, split: str, max_tasks: int | None = None, test_set: str | None = None) -> list[TaskRow]:
    """The rows of `domain`'s `split`, in its task order, at most `max_tasks`.

    Raises:
        ValueError: the domain has no such split.
    """
    tasks = domain.tasks(split)
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    name, params = key_of(domain)
    return [TaskRow(name, task.id, split, json.loads(params), test_set) for task in tasks]
