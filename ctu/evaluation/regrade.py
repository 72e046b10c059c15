"""Saved evaluation episodes re-scored against another task set (``ctu eval --regrade TASKS_FILE``), as tau2's
``evaluate-trajs --fresh-tasks`` does: tau2-bench 1.0 fixed 53 airline and retail tasks, so a result scored
against tau2 26.3's tasks can be scored again against the fixed ones without running an episode.

Each episode's tau2 messages (``tau2_messages`` in ``trajectories.jsonl``, which `ctu eval` writes) are replayed
by tau2's own `evaluate_simulation` against the task of the same id in the new file (`Domain.evaluate`); an episode
whose task is not there, or that ended by an infrastructure error, is kept as it was and counted.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctu.evaluation.policies import EvalError
from ctu.evaluation.report import summarize
from ctu.metrics import is_success

REGRADED = "regraded"
"""The folder under an evaluation's own where each regrade is written, one subfolder per tasks file."""


@dataclass(frozen=True)
class Regrade:
    """What a regrade changed.

    Attributes:
        out_dir: where the re-scored ``trajectories.jsonl`` and ``eval.json`` are.
        rescored: episodes scored again; ``became_success`` and ``became_failure`` of them changed outcome.
        unchanged_tasks_missing: episodes whose task the new file lacks (kept as scored before).
        skipped: episodes left as they were (infrastructure errors, lines without tau2 messages).
        report: the new ``eval.json``; ``before`` the old one's overall figures.
    """

    out_dir: Path
    rescored: int
    became_success: int
    became_failure: int
    unchanged_tasks_missing: int
    skipped: int
    report: dict[str, Any]
    before: dict[str, Any]


def regrade(eval_dir: Path, tasks_file: Path) -> Regrade:
    """Re-score the episodes of the evaluation in `eval_dir` against the tasks in `tasks_file` (tau2's format);
    writes ``<eval_dir>/regraded/<file stem>/`` (``trajectories.jsonl``, ``eval.json`` with the new tasks file
    and its SHA-256 in ``regraded_with``).

    Raises:
        EvalError: `eval_dir` holds no evaluation, its lines carry no tau2 messages (written before ctu kept
            them: evaluate again), or `tasks_file` cannot be read as tau2 tasks.
    """
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun
    from tau2.data_model.tasks import Task

    from ctu.evaluation.runner import RESULT, TRAJECTORIES, read_lines
    from tau_bench_env.env import shared_domain
    from tau_bench_env.outcome import Termination

    eval_dir, tasks_file = Path(eval_dir), Path(tasks_file)
    if not (eval_dir / RESULT).is_file() or not (eval_dir / TRAJECTORIES).is_file():
        raise EvalError(f"{eval_dir} holds no finished `ctu eval` result (eval.json and trajectories.jsonl)")
    try:
        raw = tasks_file.read_bytes()
        tasks = {str(task["id"]): Task.model_validate(task) for task in json.loads(raw)}
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise EvalError(f"{tasks_file} cannot be read as tau2 tasks: {error}") from None
    before = json.loads((eval_dir / RESULT).read_text(encoding="utf-8"))
    lines: list[dict[str, Any]] = list(read_lines(eval_dir / TRAJECTORIES).values())
    if lines and all("tau2_messages" not in line for line in lines):
        raise EvalError(f"the episodes in {eval_dir} carry no tau2 messages (written before ctu kept them): "
                        "evaluate again, then regrade")
    kinds = {"user": UserMessage, "assistant": AssistantMessage, "tool": ToolMessage}
    counts: Counter[str] = Counter()
    regraded = []
    for line in lines:
        task = tasks.get(str(line["task_id"]))
        if line.get("infra_error") is not None or "tau2_messages" not in line:
            counts["skipped"] += 1
        elif task is None:
            counts["missing"] += 1
        else:
            messages = [kinds[m["role"]].model_validate(m) for m in line["tau2_messages"] if m.get("role") in kinds]
            simulation = SimulationRun(id=f"regrade-{line['task_id']}-{line.get('sample', 0)}", task_id=task.id,
                                       start_time="", end_time="", duration=0.0, messages=messages,
                                       termination_reason=Termination(line["termination"]).to_tau2())
            reward = float(shared_domain(str(line["domain"])).evaluate(simulation, task).reward)
            was, now = is_success(float(line["raw_reward"])), is_success(reward)
            counts["rescored"] += 1
            counts["became_success"] += now and not was
            counts["became_failure"] += was and not now
            line = {**line, "raw_reward": reward, "regraded_from": line["raw_reward"]}
        regraded.append(line)
    out_dir = eval_dir / REGRADED / tasks_file.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRAJECTORIES).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in regraded),
                                        encoding="utf-8")
    report = {**{key: value for key, value in before.items() if key not in ("by_test_set", "overall", "repeats")},
              "regraded_with": {"tasks_file": str(tasks_file.absolute()), "tasks_sha256": hashlib.sha256(raw).hexdigest()},
              **summarize(regraded, int(before.get("samples_per_task", 1)))}
    (out_dir / RESULT).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return Regrade(out_dir, counts["rescored"], counts["became_success"], counts["became_failure"], counts["missing"],
                   counts["skipped"], report, before["overall"])
