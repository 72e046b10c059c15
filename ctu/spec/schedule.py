"""A spec's training schedule in numbers: tasks, steps per epoch, GRPO steps, optimizer steps and warm-up.

Task counts come from `tau_bench_env.gold_limits` (the built-in domains with default params, without loading
tau2); a source of any other domain leaves the schedule unknown (None). How an epoch is stepped through is the
backend's (`ctu.spec.backend_rules.step_counts`): SkyRL's dataloader drops the last short batch of each epoch
(``drop_last``) and its optimizer steps once per mini-batch, its learning-rate warm-up counted in optimizer steps;
ctu's Tinker runner also drops the short batch (a whole epoch smaller than a batch is one step) and steps its
optimizer once a GRPO step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctu.errors import CtuError
from ctu.spec.backend_rules import step_counts
from ctu.spec.models import DatasetSource, Spec


class TaskFileError(CtuError, ValueError):
    """A task file or split file that cannot serve a data source: bad input, never a crash. `faults` lists every
    fault found, each as ``(where, message)`` with `where` the domain param at fault; `where` is the first's."""

    def __init__(self, where: str, message: str, faults: list[tuple[str, str]] | None = None) -> None:
        self.faults = faults or [(where, message)]
        super().__init__("\n".join(text for _, text in self.faults))
        self.where = self.faults[0][0]


MOST_LISTED = 10
"""At most this many ids or tasks named in one fault's message (then "..." and the count)."""


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MOST_LISTED])
    return shown + (f" ... ({len(items)} in all)" if len(items) > MOST_LISTED else "")


def task_file_ids(params: Any, split: str) -> list[str]:
    """The task ids of `split` in a tau2 domain's task files (`tasks_file`, `split_file` of
    `tau_bench_env.domains.TaskSetParams`), in the tasks file's order, read as JSON without tau2.

    Raises:
        TaskFileError: every fault of the files at once (`faults`): a file missing or not of tau2's shape, an entry
            without an id, no task, a task id twice, tasks tau2's `Task` model rejects, a split file without a tasks
            file or not a mapping of lists, a split naming a task the file lacks, no such split.
    """
    import json
    from pathlib import Path

    faults: list[tuple[str, str]] = []

    def read(name: str) -> Any:
        path = getattr(params, name)
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            faults.append((f"domain.{name}", f"cannot read {path!r}: {error}"))
            return None

    if params.tasks_file is None:
        raise TaskFileError("domain.split_file", "a split file needs its tasks_file")
    tasks = read("tasks_file")
    splits = read("split_file") if params.split_file is not None else {}
    where, name = "domain.tasks_file", repr(params.tasks_file)
    ids: list[str] = []
    if tasks is not None and not isinstance(tasks, list):
        faults.append((where, f"{name} is not a JSON list of tau2 tasks (objects with an `id`)"))
    elif tasks is not None:
        if not tasks:
            faults.append((where, f"{name} holds no task"))
        if no_id := [str(index) for index, task in enumerate(tasks) if not isinstance(task, dict) or "id" not in task]:
            faults.append((where, f"{name}: entries without an `id` (a tau2 task is an object with one), at index "
                                  f"{_listed(no_id)}"))
        ids = [str(task["id"]) for task in tasks if isinstance(task, dict) and "id" in task]
        if twice := sorted({task_id for task_id in ids if ids.count(task_id) > 1}):
            faults.append((where, f"{name} holds task id(s) more than once: {_listed(twice)}"))
        if rejected := _rejected_tasks([task for task in tasks if isinstance(task, dict) and "id" in task]):
            faults.append((where, f"{name}: tau2's Task model rejects " + "; ".join(rejected)))
    if splits is not None and (not isinstance(splits, dict) or not all(isinstance(v, list) for v in splits.values())):
        faults.append(("domain.split_file", f"{params.split_file!r} is not a JSON mapping of split name to task ids"))
    elif splits and tasks is not None:
        known = set(ids)
        for split_name, named in splits.items():
            if unknown := sorted({str(task_id) for task_id in named} - known):
                faults.append(("domain.split_file", f"{params.split_file!r}: split {split_name!r} names task(s) "
                                                    f"{name} lacks: {_listed(unknown)}"))
    if not faults:
        from tau_bench_env.domains import split_task_ids

        try:
            return split_task_ids(ids, splits, split, repr(params.split_file or params.tasks_file))
        except ValueError as error:
            faults.append(("split", str(error)))
    raise TaskFileError(*faults[0], faults=faults)


def _rejected_tasks(tasks: list[dict[str, Any]], most: int = MOST_LISTED) -> list[str]:
    """Why tau2's `Task` model rejects each task it rejects (the first `most`, each as "task ID: the first
    error", then how many in all); imports tau2's task model (~0.6 s)."""
    import pydantic

    from tau_bench_env.runtime import prepare

    prepare()  # tau2 quietly (no loguru warning on the console)
    from tau2.data_model.tasks import Task

    rejected = []
    for task in tasks:
        try:
            Task.model_validate(task)
        except pydantic.ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            rejected.append(f"task {task['id']}: {where + ': ' if where else ''}{first['msg']}")
    return rejected[:most] + ([f"... ({len(rejected)} tasks in all)"] if len(rejected) > most else [])


def source_task_ids(source: DatasetSource) -> list[str] | None:
    """The task ids `source` uses (tau2's order, or its task files', cut at `max_tasks`), or None when they are
    not known without loading its domain (a custom domain, or a built-in one with other params)."""
    from tau_bench_env.gold_limits import gold_limits

    params = source.domain.params
    if getattr(params, "tasks_file", None) is not None:
        try:
            return task_file_ids(params, source.split)[: source.max_tasks]
        except TaskFileError:
            return None
    if params.model_dump() != type(params)().model_dump():
        return None
    data = gold_limits().get(source.domain.type)
    parts = source.split.split("+")
    if data is None or any(part not in data["splits"] for part in parts):
        return None
    union = dict.fromkeys(task_id for part in parts for task_id in data["splits"][part])  # as `Domain.tasks` joins them
    return list(union)[: source.max_tasks]


@dataclass(frozen=True)
class Schedule:
    """How a run of the spec steps (counts; none of them time).

    Attributes:
        train_tasks: training tasks per epoch (every `data.train` source pooled).
        batch_size: tasks per GRPO step (`trainer.train_batch_size`).
        steps_per_epoch: GRPO steps per epoch; 0 when an epoch holds fewer tasks than a batch on SkyRL.
        dropped_per_epoch: tasks no step of an epoch uses (the last short batch).
        total_steps: GRPO steps of the run (epochs x steps per epoch, capped by `trainer.max_steps`).
        optimizer_steps_per_step: optimizer steps per GRPO step.
        warmup_steps: optimizer steps of learning-rate warm-up (`trainer.optimizer.warmup_steps`).
    """

    train_tasks: int
    batch_size: int
    steps_per_epoch: int
    dropped_per_epoch: int
    total_steps: int
    optimizer_steps_per_step: int
    warmup_steps: int
    sft: bool = False
    """An SFT run (`data.sft`): its units are conversations and SFT steps."""
    scheduler: str = "constant"
    """The learning rate after the warm-up (`trainer.optimizer.scheduler`)."""

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps of the whole run."""
        return self.total_steps * self.optimizer_steps_per_step

    def describe(self) -> str:
        """One line for `ctu explain`."""
        unit, step = ("SFT conversations", "SFT") if self.sft else ("training tasks", "GRPO")
        dropped = f" ({self.dropped_per_epoch} left out of each epoch)" if self.dropped_per_epoch else ""
        return (f"{self.train_tasks} {unit} at {self.batch_size} a step: {self.steps_per_epoch} {step} step(s) per "
                f"epoch{dropped}, {self.total_steps} in the run; {self.optimizer_steps_per_step} optimizer step(s) each: "
                f"{self.optimizer_steps} optimizer steps, the first {self.warmup_steps} warming up the learning rate"
                + ("" if self.scheduler == "constant" else f", then decaying to 0 ({self.scheduler})"))


def schedule(spec: Spec) -> Schedule | None:
    """The spec's schedule, or None when a training source's task count is unknown (`source_task_ids`), or
    `data.sft`'s file cannot be read."""
    if spec.data.sft is not None:
        tasks = sft_row_count(spec.data.sft)
        if tasks is None:
            return None
    else:
        counts = [source_task_ids(source) for source in spec.data.train]
        if any(ids is None for ids in counts):
            return None
        tasks = sum(len(ids or ()) for ids in counts)
    trainer = spec.trainer
    stepped = step_counts(spec, tasks)
    total = stepped.per_epoch * trainer.epochs
    if trainer.max_steps is not None:
        total = min(total, trainer.max_steps)
    return Schedule(tasks, trainer.train_batch_size, stepped.per_epoch, stepped.dropped, total, stepped.optimizer_steps,
                    trainer.optimizer.warmup_steps, spec.data.sft is not None, trainer.optimizer.scheduler)


def sft_row_count(path: str) -> int | None:
    """Conversations in `ctu data sft`'s ``train.parquet`` (`path`: the file or its folder), from the file's footer;
    None when it cannot be read."""
    from pathlib import Path

    import pyarrow.parquet as pq

    file = Path(path) / "train.parquet" if Path(path).is_dir() else Path(path)
    try:
        parquet = pq.ParquetFile(file)
        return int(parquet.metadata.num_rows) if "messages" in parquet.schema_arrow.names else None
    except (OSError, ValueError):
        return None
