"""Task rows (`TaskRow`, the one row type of both backends) and SkyRL-format parquet files of them: one per
domain and split, plus a combined training file.

A parquet row is one task: ``prompt`` (a list of OpenAI messages: the agent's system prompt with the domain
policy; the episode replaces it with its own at `init`), ``env_class`` (``tau_bench``), ``data_source`` (the
domain, or the evaluation set), and the extras SkyRL passes to the environment: ``domain``, ``task_id``,
``split``, ``domain_params``. Files are deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tau_bench_env.domain_keys import DomainKey, domain_key, key_of
from tau_bench_env.domains import Domain
from tau_bench_env.runtime import prepare

ENV_CLASS = "tau_bench"
"""The `env_class` column of prepared datasets: the id the skyrl backend registers its SkyRL-gym environment under
(`ctu.backends.skyrl.gym_env`)."""
COMBINED_TRAIN = "train.parquet"
"""The file pooling every domain's `train` split."""


def agent_system_prompt(policy: str) -> str:
    """tau2's agent system prompt (`tau2.agent.llm_agent.SYSTEM_PROMPT`) for a domain policy."""
    prepare()
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


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


def parquet_rows(domain: Domain, rows: Sequence[TaskRow], data_source: str | None = None) -> list[dict[str, object]]:
    """`rows` (of `domain`) as SkyRL's dataset loader reads them: the agent's system prompt with the domain's policy
    (SkyRL filters prompts by length), ``env_class``, ``data_source`` (SkyRL groups evaluation metrics by it;
    default the domain) and the extras, ``domain_params`` as JSON."""
    system = agent_system_prompt(domain.policy)
    return [
        {
            "prompt": [{"role": "system", "content": system}],
            "env_class": ENV_CLASS,
            "data_source": data_source or row.domain,
            "domain": row.domain,
            "task_id": row.task_id,
            "split": row.split,
            "domain_params": json.dumps(dict(row.domain_params), sort_keys=True),
        }
        for row in rows
    ]


def write_rows(rows: list[dict[str, object]], path: Path) -> Path:
    """Write rows as zstd-compressed parquet with columns of fixed types and no timestamps (deterministic: the same
    rows give the same bytes), to a temporary name first, then renamed to `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema(
        [
            ("prompt", pa.list_(message)),
            ("env_class", pa.string()),
            ("data_source", pa.string()),
            ("domain", pa.string()),
            ("task_id", pa.string()),
            ("split", pa.string()),
            ("domain_params", pa.string()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")  # renamed once whole: never a half-written file at `path`
    pq.write_table(table, temporary, compression="zstd")
    temporary.replace(path)
    return path


def prepare_datasets(
    domains: Sequence[Domain], splits: Sequence[str], out: Path, max_tasks_per_domain: int | None = None
) -> list[Path]:
    """Write ``<out>/<domain>_<split>.parquet`` for each pair, and ``<out>/train.parquet`` pooling every
    domain's ``train`` split when it is asked for. Every split is read before anything is written, so a split
    that fails leaves no file behind.

    Returns:
        The files written, in order.

    Raises:
        ValueError: no domain or no split is given, or a domain lacks a split.
    """
    if not domains or not splits:
        raise ValueError(f"nothing to write: name at least one {'domain' if not domains else 'split'}")
    tables: dict[Path, list[dict[str, object]]] = {}
    pooled: list[dict[str, object]] = []
    for domain in domains:
        for split in splits:
            rows = parquet_rows(domain, task_rows(domain, split, max_tasks_per_domain))
            tables[Path(out) / f"{domain.name}_{split}.parquet"] = rows
            if split == "train":
                pooled += rows
    if "train" in splits:
        tables[Path(out) / COMBINED_TRAIN] = pooled
    return [write_rows(rows, path) for path, rows in tables.items()]
