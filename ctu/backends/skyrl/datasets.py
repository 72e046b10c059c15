"""The training data SkyRL reads: task rows (`tau_bench_env.data.TaskRow`) as SkyRL-format parquet files, one per
domain and split, plus a combined training file (`ctu data prepare`, and each skyrl run's ``data/``).

A parquet row is one task: ``prompt`` (a list of OpenAI messages: the agent's system prompt with the domain
policy; the episode replaces it with its own at `init`), ``env_class`` (``tau_bench``), ``data_source`` (the
domain, or the evaluation set), and the extras SkyRL passes to the environment: ``domain``, ``task_id``,
``split``, ``domain_params``. Files are deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tau_bench_env.data import TaskRow, task_rows
from tau_bench_env.domains import Domain
from tau_bench_env.prompts import agent_system_prompt

ENV_CLASS = "tau_bench"
"""The `env_class` column of prepared datasets: the id the skyrl backend registers its SkyRL-gym environment under
(`ctu.backends.skyrl.gym_env`)."""
COMBINED_TRAIN = "train.parquet"
"""The file pooling every domain's `train` split."""


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
