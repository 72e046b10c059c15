"""Prepared datasets: one SkyRL-format parquet file per domain and split, plus a combined training file.

Each row is one task: ``prompt`` (a list of OpenAI messages: the agent's system prompt with the domain
policy; the episode replaces it with its own at `init`), ``env_class`` (``tau_bench``), ``data_source`` (the
domain), and the extras SkyRL passes to the environment: ``domain``, ``task_id``, ``split``. Files are
deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tau_bench_env.env import ENV_CLASS, shared_domain
from tau_bench_env.runtime import prepare

COMBINED_TRAIN = "train.parquet"
"""The file pooling every domain's `train` split."""


def agent_system_prompt(policy: str) -> str:
    """tau2's agent system prompt (`tau2.agent.llm_agent.SYSTEM_PROMPT`) for a domain policy."""
    prepare()
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


def dataset_rows(
    domain: str, split: str, max_tasks: int | None = None, data_source: str | None = None, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of one domain and split, in tau2's task order (at most `max_tasks`).

    Args:
        data_source: the rows' `data_source` (SkyRL groups evaluation metrics by it); default the domain.
        params: the domain component's params.

    Raises:
        ValueError: the domain has no such split. ComponentError: unknown domain.
    """
    import json

    component = shared_domain(domain, json.dumps(params or {}, sort_keys=True))
    tasks = component.tasks(split)[:max_tasks] if max_tasks is not None else component.tasks(split)
    system = agent_system_prompt(component.policy)
    return [
        {
            "prompt": [{"role": "system", "content": system}],
            "env_class": ENV_CLASS,
            "data_source": data_source or domain,
            "domain": domain,
            "task_id": task.id,
            "split": split,
            "domain_params": json.dumps(params or {}, sort_keys=True),
        }
        for task in tasks
    ]


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows as zstd-compressed parquet with columns of fixed types and no timestamps (deterministic: the same
    rows give the same bytes)."""
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
    pq.write_table(table, path, compression="zstd")
    return path


def prepare_datasets(
    domains: Sequence[str], splits: Sequence[str], out: Path, max_tasks_per_domain: int | None = None
) -> list[Path]:
    """Write ``<out>/<domain>_<split>.parquet`` for each pair, and ``<out>/train.parquet`` pooling every
    domain's ``train`` split when it is asked for.

    Returns:
        The files written, in order.

    Raises:
        ValueError: a domain lacks a split. ComponentError: unknown domain.
    """
    written: list[Path] = []
    pooled: list[dict[str, Any]] = []
    for domain in domains:
        for split in splits:
            rows = dataset_rows(domain, split, max_tasks_per_domain)
            written.append(write_rows(rows, Path(out) / f"{domain}_{split}.parquet"))
            if split == "train":
                pooled += rows
    if "train" in splits:
        written.append(write_rows(pooled, Path(out) / COMBINED_TRAIN))
    return written
