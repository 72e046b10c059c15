"""Held-out tasks: the tasks no training set or SFT data may hold, whatever the spec names and whichever rows a
command keeps. A task is held out when it is in one of the spec's validation or test sets, or in a held-out split
(`HELD_OUT_SPLITS`) of its domain: tau2's own ``test`` split, or a task set's ``test`` or ``validation`` split (the
one `ctu tasks generate` holds out). Read from the task and split files and tau2's recorded splits, without loading
tau2 (`ctu validate` runs it)."""

from __future__ import annotations

from collections.abc import Iterator, Set

from pydantic import BaseModel

from ctu.spec.errors import SpecIssue
from ctu.spec.models import DatasetSource, Spec

HELD_OUT_SPLITS = ("test", "validation")
"""Split names whose tasks are held out: tau2's ``test`` (retail, airline, telecom), and the ``validation`` split a
generated task set holds out (`task_generation.validation_ratio`)."""


def held_out_split_ids(domain_type: str, params: BaseModel | None) -> dict[str, list[str]] | None:
    """Each held-out split of a domain (its task files with `params`, or tau2's own tasks with default params) ->
    its task ids; {} when it has none; None when they are not known without loading the domain (a custom domain, a
    built-in one with other params, or task files that cannot be read, which `check_domains` reports)."""
    import json
    from pathlib import Path

    from ctu.spec.schedule import TaskFileError, task_file_ids
    from tau_bench_env.gold_limits import gold_limits

    if getattr(params, "tasks_file", None) is not None:
        split_file = getattr(params, "split_file", None)
        if split_file is None:
            return {}
        try:
            splits = json.loads(Path(split_file).read_text(encoding="utf-8"))
            names = [name for name in splits if name in HELD_OUT_SPLITS] if isinstance(splits, dict) else None
            return None if names is None else {name: task_file_ids(params, name) for name in names}
        except (OSError, ValueError, TaskFileError):
            return None
    if params is not None and params.model_dump() != type(params)().model_dump():
        return None
    recorded = gold_limits().get(domain_type)
    if recorded is None:
        return None
    return {name: list(ids) for name, ids in recorded["splits"].items() if name in HELD_OUT_SPLITS}


def held_out_keys(spec: Spec, other_domains: Set[str] = frozenset()) -> dict[tuple[str, str], str]:
    """``(domain, task id)`` -> why it is held out, for every task the spec holds out that is known without loading
    a domain: its validation and test sets' tasks, and the held-out splits of every domain its data sources use (as
    those sources' params give them); `other_domains` (domains some data names that the spec does not, e.g. the
    episodes of `ctu data sft --from-eval`) with tau2's own splits."""
    from ctu.spec.schedule import source_task_ids

    keys: dict[tuple[str, str], str] = {}
    sources: list[DatasetSource] = [*spec.data.train, *spec.data.evaluation_sets().values()]
    for name, source in spec.data.evaluation_sets().items():
        for task_id in source_task_ids(source) or ():
            keys.setdefault((source.domain.type, task_id), f"test set {name!r}")
    seen = {source.domain.type for source in sources}
    domains: list[tuple[str, BaseModel | None]] = [(source.domain.type, source.domain.params) for source in sources]
    domains += [(name, None) for name in sorted(other_domains - seen)]
    for domain, params in domains:
        for split, ids in (held_out_split_ids(domain, params) or {}).items():
            for task_id in ids:
                keys.setdefault((domain, str(task_id)), f"{domain}'s held-out split {split!r}")
    return keys


def leaked(keys: list[tuple[str, str]], held_out: dict[tuple[str, str], str]) -> list[str]:
    """Each of `keys` that `held_out` holds, once, as ``domain/task_id (why)``, in order."""
    return list(dict.fromkeys(f"{domain}/{task_id} ({held_out[(domain, task_id)]})" for domain, task_id in keys
                              if (domain, task_id) in held_out))


def sft_task_keys(path: str) -> list[tuple[str, str]]:
    """``(domain, task id)`` of every row of `ctu data sft`'s ``train.parquet`` (`path`: the file or its folder),
    from its columns; [] when the file does not record them (conversations not written by ctu)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    file = Path(path) / "train.parquet" if Path(path).is_dir() else Path(path)
    table = pq.read_table(file, columns=[name for name in ("domain", "task_id") if name in pq.read_schema(file).names])
    if table.num_columns < 2:
        return []
    return list(zip(map(str, table.column("domain").to_pylist()), map(str, table.column("task_id").to_pylist()), strict=True))


def check_held_out(spec: Spec) -> Iterator[SpecIssue]:
    """No training source and no SFT conversation holds a held-out task: a task of the spec's validation or test
    sets, or of its domain's ``test`` or ``validation`` split, from what the task, split and SFT files record
    (a `ctu validate` check, `ctu.spec.checks`)."""
    from ctu.spec.schedule import sft_row_count, source_task_ids

    rows = sft_task_keys(spec.data.sft) if spec.data.sft is not None and sft_row_count(spec.data.sft) else []
    held_out = held_out_keys(spec, {domain for domain, _ in rows})
    for index, source in enumerate(spec.data.train):
        if found := leaked([(source.domain.type, task_id) for task_id in source_task_ids(source) or ()], held_out):
            yield SpecIssue(f"data.train.{index}.split", f"{len(found)} held-out task(s) would train: "
                            f"{', '.join(found[:5])}{' ...' if len(found) > 5 else ''}; train on a split without them")
    if found := leaked(rows, held_out):
        yield SpecIssue("data.sft", f"{len(found)} held-out task(s) in the SFT data: {', '.join(found[:5])}"
                                    f"{' ...' if len(found) > 5 else ''}; write it again with `ctu data sft`, which refuses them")
