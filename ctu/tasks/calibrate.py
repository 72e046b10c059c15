"""`ctu tasks calibrate`: each training task's pass rate under a policy, and difficulty buckets written as splits.

Every task of one of the spec's training sources is played `samples` times by the policy (any policy `ctu eval`
accepts: an endpoint, a Tinker checkpoint, a run directory, the spec's own model), at the training temperature
(`rollout.temperature`: calibration measures what GRPO's groups will see), with the spec's user simulator, and
scored as tau2 scores it (`ctu.evaluation.runner`: its episodes are resumable, its infrastructure errors run
again). A task's pass rate is its successes over its samples; its bucket (`BUCKETS`) says whether a GRPO group
of it can have a spread: a task always solved (`easy`) or never (`unsolved`) gives every sample the same reward,
so no advantage. The idea of training on tasks of intermediate difficulty follows the Vertex AI report on
Qwen3-8B on tau2 (mixing easy, medium and hard tasks gave the best average) and DAPO's dynamic sampling.

Written in ``--out DIR``: ``calibration.json`` (per task: pass rate, successes, samples, bucket), ``tasks.json``
and ``split_tasks.json`` in tau2's format (the source's task file and its splits, or the calibrated tasks of a
built-in domain, plus one split per bucket), and ``episodes/`` (the evaluation's own files).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.errors import NothingMeasuredError
from ctu.metrics import is_success
from ctu.output_folders import refusal, unowned

if TYPE_CHECKING:
    from ctu.evaluation.policies import PolicyChoice
    from ctu.spec import Spec
    from ctu.spec.models import DatasetSource

BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("unsolved", 0.0, 0.0),
    ("hard", 0.0, 0.5),
    ("medium", 0.5, 1.0),
    ("easy", 1.0, 1.0),
)
"""``(name, low, high)``: `unsolved` is a pass rate of 0, `easy` of 1; `hard` is in (0, 0.5), `medium` in [0.5, 1)."""


def bucket(pass_rate: float) -> str:
    """The bucket (`BUCKETS`) of a pass rate in [0, 1]."""
    if pass_rate <= 0.0:
        return "unsolved"
    if pass_rate >= 1.0:
        return "easy"
    return "hard" if pass_rate < 0.5 else "medium"


@dataclass
class Calibration:
    """A finished calibration: per task ``{"pass_rate", "successes", "samples", "bucket"}`` and where it is."""

    tasks: dict[str, dict[str, object]]
    out_dir: Path
    ran: int

    def counts(self) -> dict[str, int]:
        """Tasks per bucket, in `BUCKETS` order."""
        return {name: sum(task["bucket"] == name for task in self.tasks.values()) for name, _, _ in BUCKETS}


OWN_FILES = frozenset({"episodes", "calibration.json", "tasks.json", "split_tasks.json"})
"""What `calibrate_tasks` writes in its output folder (``episodes``: the evaluation it runs)."""


def calibrate_tasks(spec: Spec, choice: PolicyChoice, out_dir: Path, *, source: int = 0, samples: int = 4,
                    limit: int | None = None, concurrency: int = 32, overwrite: bool = False,
                    progress: bool = True) -> Calibration:
    """Calibrate the tasks of ``spec.data.train[source]`` (its first `limit`) under `choice` (see the module
    docstring).

    Raises:
        EvalError: no such training source; `out_dir` holding files this command does not write (a task set of
            one's own included); as `ctu.evaluation.runner.run_evaluation`.
        NothingMeasuredError: every episode ended by an infrastructure error, or none reached a policy turn (a first
            prompt the context cannot hold: `ctu.evaluation.report.policy_never_played`); nothing is written but the
            episodes.
    """
    from ctu.evaluation.policies import EvalError
    from ctu.evaluation.report import policy_never_played
    from ctu.evaluation.runner import TRAJECTORIES, read_lines, run_evaluation

    if not 0 <= source < len(spec.data.train):
        raise EvalError(f"no training source {source}: the spec has {len(spec.data.train)} (data.train.0 ...)")
    out_dir = Path(out_dir)
    if found := unowned(out_dir, OWN_FILES, ("tasks.json", "calibration.json")):
        raise EvalError(refusal(out_dir, "ctu tasks calibrate", found))
    train = spec.data.train[source]
    calibrating = spec.model_copy(deep=True)
    calibrating.data.test_sets = {"calibration": train}
    calibrating.data.validation = None
    calibrating.rollout.eval_n_samples_per_prompt = samples
    calibrating.rollout.eval_temperature = spec.rollout.temperature
    result = run_evaluation(calibrating, choice, out_dir / "episodes", limit=limit, concurrency=concurrency,
                            overwrite=overwrite, progress=progress)
    overall = result.report["overall"]
    if isinstance(overall, dict) and (why := policy_never_played(overall)):
        raise NothingMeasuredError(f"no task calibrated: {why}; no bucket written")
    tasks = _pass_rates(out_dir / "episodes" / TRAJECTORIES)
    if not tasks:
        raise NothingMeasuredError(f"no task calibrated: every one of the {len(read_lines(out_dir / 'episodes' / TRAJECTORIES))} "
                                   "episode(s) ended by an infrastructure error (their tracebacks in "
                                   f"{out_dir / 'episodes' / 'eval.log'}); no bucket written. Check the endpoint, then "
                                   "run the same command again: it plays them again")
    all_tasks, splits = _task_set(train, tasks)
    report = {"policy": choice.label(), "samples": samples, "temperature": spec.rollout.temperature,
              "source": f"data.train.{source}", "domain": train.domain.type, "split": train.split,
              "buckets": {name: [low, high] for name, low, high in BUCKETS}, "tasks": tasks}
    files = {"calibration.json": report, "tasks.json": all_tasks, "split_tasks.json": splits}
    for name, data in files.items():
        temporary = out_dir / f".{name}.tmp"
        temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        temporary.replace(out_dir / name)
    return Calibration(tasks, out_dir, result.ran)


def _pass_rates(trajectories: Path) -> dict[str, dict[str, object]]:
    """Each task's pass rate over its episodes in `trajectories` that are no infrastructure error: ``{task id:
    {pass_rate, successes, samples, bucket}}``."""
    from ctu.evaluation.runner import read_lines

    by_task: dict[str, list[bool]] = defaultdict(list)
    for line in read_lines(trajectories).values():
        if line.get("infra_error") is None:
            by_task[str(line["task_id"])].append(is_success(float(str(line["raw_reward"]))))
    tasks = {}
    for task_id, outcomes in by_task.items():
        rate = sum(outcomes) / len(outcomes)
        tasks[task_id] = {"pass_rate": round(rate, 4), "successes": sum(outcomes), "samples": len(outcomes),
                          "bucket": bucket(rate)}
    return tasks


def _task_set(train: DatasetSource, tasks: dict[str, dict[str, object]]) -> tuple[list[dict[str, object]], dict[str, list[str]]]:
    """The calibrated source's task set with the buckets as splits: its tasks file's every task (tau2's own domain:
    the calibrated tasks) and its split file's splits other than the buckets', then each bucket's calibrated tasks
    in the file's order."""
    from tau2.data_model.tasks import Task

    from ctu.components.domains import build_domain

    params = train.domain.params
    domain = build_domain(train.domain.type, params.model_dump())
    tasks_file = getattr(params, "tasks_file", None)
    split_file = getattr(params, "split_file", None)
    if tasks_file is not None:
        all_tasks = json.loads(Path(tasks_file).read_text(encoding="utf-8"))
        splits = json.loads(Path(split_file).read_text(encoding="utf-8")) if split_file is not None else {}
    else:
        all_tasks = [task.model_dump(mode="json", exclude_none=True) for task in domain.tasks(train.split)
                     if str(task.id) in tasks]
        splits = {}
    order = [str(Task.model_validate(task).id) for task in all_tasks]
    splits = {name: ids for name, ids in splits.items() if name not in {b for b, _, _ in BUCKETS}}
    splits |= {name: [i for i in order if i in tasks and tasks[i]["bucket"] == name] for name, _, _ in BUCKETS}
    return all_tasks, splits
