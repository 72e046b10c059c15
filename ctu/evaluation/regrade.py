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

from ctu.errors import NothingMeasuredError
from ctu.evaluation.policies import EvalError
from ctu.evaluation.report import summarize
from ctu.metrics import is_success
from ctu.output_folders import REGRADED


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
            them: evaluate again), `tasks_file` cannot be read as tau2 tasks, or holds other tasks than those
            evaluated (`not_the_evaluations_tasks`), or its folder under ``regraded/`` holds a regrade against another
            file of the same name (the same file again re-scores in place).
        NothingMeasuredError: no episode was re-scored (the file holds none of the evaluated tasks); nothing is
            written.
    """
    from tau2.data_model.tasks import Task

    from ctu.evaluation.runner import RESULT, TRAJECTORIES, read_lines

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
    if problem := not_the_evaluations_tasks(before, lines, tasks):
        raise EvalError(f"{tasks_file} does not hold the tasks {eval_dir} evaluated: {problem}; regrade against a "
                        "revision of those tasks (the same customers and databases, other evaluation criteria)")
    counts: Counter[str] = Counter()
    regraded = [_rescored(line, tasks, counts) for line in lines]
    if not counts["rescored"]:
        raise NothingMeasuredError(f"none of the {len(lines)} episode(s) in {eval_dir} was re-scored ({counts['missing']} "
                                   f"whose task {tasks_file} lacks, {counts['skipped']} infrastructure error(s) or lines "
                                   "without tau2 messages): nothing was written")
    out_dir = eval_dir / REGRADED / tasks_file.stem
    digest = hashlib.sha256(raw).hexdigest()
    if (out_dir / RESULT).is_file():
        earlier = json.loads((out_dir / RESULT).read_text(encoding="utf-8")).get("regraded_with") or {}
        if earlier.get("tasks_sha256") != digest:
            raise EvalError(f"{out_dir} holds a regrade against another {tasks_file.name} ({earlier.get('tasks_file')}, "
                            "other contents): rename the tasks file, or delete that folder to regrade again")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRAJECTORIES).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in regraded),
                                        encoding="utf-8")
    report = {**{key: value for key, value in before.items() if key not in ("by_test_set", "overall", "repeats")},
              "regraded_with": {"tasks_file": str(tasks_file.absolute()), "tasks_sha256": digest},
              **summarize(regraded, int(before.get("samples_per_task", 1)))}
    (out_dir / RESULT).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return Regrade(out_dir, counts["rescored"], counts["became_success"], counts["became_failure"], counts["missing"],
                   counts["skipped"], report, before["overall"])


def _rescored(line: dict[str, Any], tasks: dict[str, Any], counts: Counter[str]) -> dict[str, Any]:
    """`line` scored by tau2 against its task in `tasks` (its tau2 messages replayed into tau2's evaluator): its
    tau2 reward, reward breakdown, checks and failed actions the new ones, ``regraded_from`` the reward it had; as it was when it is an infrastructure error, carries no tau2 messages, or
    its task is not in `tasks`. Counts what happened in `counts` (skipped, missing, rescored, became_success,
    became_failure)."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun

    from tau_bench_env.env import shared_domain
    from tau_bench_env.outcome import Termination, check_scores, failed_actions, reward_breakdown

    task = tasks.get(str(line["task_id"]))
    if line.get("infra_error") is not None or "tau2_messages" not in line:
        counts["skipped"] += 1
        return line
    if task is None:
        counts["missing"] += 1
        return line
    kinds = {"user": UserMessage, "assistant": AssistantMessage, "tool": ToolMessage}
    messages = [kinds[m["role"]].model_validate(m) for m in line["tau2_messages"] if m.get("role") in kinds]
    simulation = SimulationRun(id=f"regrade-{line['task_id']}-{line.get('sample', 0)}", task_id=task.id,
                               start_time="", end_time="", duration=0.0, messages=messages,
                               termination_reason=Termination(line["termination"]).to_tau2())
    info = shared_domain(str(line["domain"])).evaluate(simulation, task)
    reward = float(info.reward)
    was, now = is_success(float(line["raw_reward"])), is_success(reward)
    counts["rescored"] += 1
    counts["became_success"] += now and not was
    counts["became_failure"] += was and not now
    return {**line, "raw_reward": reward, "regraded_from": line["raw_reward"], "reward_breakdown": reward_breakdown(info),
            "checks": check_scores(info), "failed_actions": failed_actions(info)}


def not_the_evaluations_tasks(report: dict[str, Any], lines: list[dict[str, Any]], tasks: dict[str, Any]) -> str | None:
    """Why `tasks` (id -> tau2 `Task`) are not a revision of the tasks an evaluation ran (its ``eval.json`` `report`
    and trajectory `lines`), or None: they call tools the evaluation's domain lacks (`ctu.components.domains.
    domain_mismatch`), or any evaluated task they hold asks for another customer or starts from another database
    (its `tau_bench_env.task_content.scenario_digest` is not the one ``eval.json`` recorded when it was evaluated),
    named; an evaluation written before ctu recorded them is checked against its tasks' source, and refused when
    that file changed since (its SHA-256 is not the one recorded). A regrade keeps the episodes; only the evaluation
    criteria may differ."""
    from ctu.components.domains import domain_mismatch
    from tau_bench_env.env import shared_domain
    from tau_bench_env.task_content import scenario_digest

    sources = report.get("test_set_sources") or {}
    evaluated: dict[tuple[str, str], str] = {}  # (domain, task id) -> its test set
    for line in lines:
        evaluated.setdefault((str(line["domain"]), str(line["task_id"])), str(line.get("test_set")))
    for domain in sorted({domain for domain, _ in evaluated}):
        held = [tasks[task_id] for name, task_id in evaluated if name == domain and task_id in tasks]
        try:
            if held and (mismatch := domain_mismatch(shared_domain(domain), held)):
                return f"they are not of domain {domain!r}: {mismatch}"
        except KeyError:  # not one of tau2's domains: nothing to check its tools against
            continue
    differ: list[str] = []
    for (domain, task_id), test_set in evaluated.items():
        if task_id not in tasks:
            continue
        source = sources.get(test_set) or {}
        recorded = (source.get("task_scenarios") or {}).get(task_id)
        if recorded is None:
            recorded = _scenario_at_source(domain, task_id, source)
        if recorded is None:
            return (f"{domain}/{task_id} was evaluated before ctu recorded each task's scenario, and its tasks file "
                    f"({source.get('tasks_file')}) changed since: what it evaluated is unknown; evaluate again, then regrade")
        if recorded != scenario_digest(tasks[task_id]):
            differ.append(f"{domain}/{task_id}")
    if differ:
        return (f"{len(differ)} evaluated task(s) ask for another customer or start from another database than when "
                f"they were evaluated: {', '.join(differ[:10])}{' ...' if len(differ) > 10 else ''}")
    return None


def _scenario_at_source(domain: str, task_id: str, source: dict[str, Any]) -> str | None:
    """The scenario digest of an evaluated task read from its source now (tau2's own tasks, which the installed
    version pins, or the tasks file ``eval.json`` names, when that file is still the one evaluated: the same
    SHA-256); None when the file changed or cannot be read."""
    from tau2.data_model.tasks import Task

    from tau_bench_env.env import shared_domain
    from tau_bench_env.task_content import scenario_digest

    tasks_file = source.get("tasks_file")
    try:
        if tasks_file is None:
            return scenario_digest(shared_domain(domain).task(task_id))
        raw = Path(tasks_file).read_bytes()
        if hashlib.sha256(raw).hexdigest() != source.get("tasks_sha256"):
            return None
        return scenario_digest(Task.model_validate(next(t for t in json.loads(raw) if str(t["id"]) == task_id)))
    except (KeyError, OSError, ValueError, StopIteration):
        return None
