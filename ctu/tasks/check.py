"""Checking a task set by replaying each task's gold actions, as tau2 would score them (`ctu tasks check`).

A task is sound when, from its initial state in a fresh environment of its domain: every gold action runs without
a tool error; every gold write changes the agent's database (a write that changes nothing names a record or a
value that is already so); the gold replay, played through an episode with the `scripted` user simulator and
scored by tau2's own evaluation path, scores 1.0; and the gold solution fits the episode's `max_turns` and
`max_errors`. The file-level faults (no task, an id twice, a split naming a task the file lacks, a task tau2's
`Task` model rejects) are `ctu.spec.schedule.task_file_ids`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from ctu.spec import Spec, SpecIssue
    from tau_bench_env.domains import Domain


@dataclass(frozen=True)
class TaskFault:
    """Why one task failed the check."""

    task_id: str
    reason: str
    unsolvable: bool = False
    """The gold replay itself scores below 1: no policy can earn the task's reward (the other faults are of gold
    actions tau2 still scores 1.0, e.g. a failing lookup of an id the user first gives wrong, as tau2's own
    retail tasks hold)."""


@dataclass
class CheckReport:
    """What `check_tasks` found: the tasks checked and every fault, a task at most once per reason."""

    checked: int = 0
    faults: list[TaskFault] = field(default_factory=list)

    @property
    def failed_ids(self) -> list[str]:
        """The ids of the tasks with at least one fault, in the order checked."""
        return list(dict.fromkeys(fault.task_id for fault in self.faults))


@dataclass
class GoldReplay:
    """A task's gold actions run in order in a fresh environment of its domain from the task's initial state.

    Attributes:
        environment: the environment after the last action (its database is the gold outcome).
        responses: each action's tool response content (a string, as tau2's `ToolMessage` holds it).
        failed: indices of the actions that answered with a tool error.
        no_op_writes: indices of the assistant writes (`Domain.write_tools`) that changed nothing.
        writes: indices of the actions that changed the agent's database (`effective_writes`).
    """

    environment: object
    responses: list[str]
    failed: list[int]
    no_op_writes: list[int]
    writes: tuple[int, ...]

    def faults(self, task: Task) -> list[str]:
        """One line per failed action and per write that changes nothing."""
        actions = gold_actions_of(task)
        return ([f"gold action {i} ({actions[i].name}) fails: {self.responses[i][:200]}" for i in self.failed]
                + [f"gold action {i} ({actions[i].name}) is a write that changes nothing" for i in self.no_op_writes])


def gold_actions_of(task: Task) -> list:
    """`task`'s gold actions (tau2 `Action`s), [] when it has none."""
    return list(task.evaluation_criteria.actions or []) if task.evaluation_criteria else []


def replay_gold(domain: Domain, task: Task) -> GoldReplay:
    """Run `task`'s gold actions in order in a fresh environment of `domain` from the task's initial state (and
    once more to see which change the database: `tau_bench_env.replay.effective_writes`)."""
    from tau2.data_model.message import ToolCall

    from tau_bench_env.replay import effective_writes

    environment = domain.episode_environment(task)
    state = task.initial_state
    if state is not None:
        environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
    actions = gold_actions_of(task)
    responses, failed = [], []
    for index, action in enumerate(actions):
        call = ToolCall(id=f"gold_{index}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor)
        response = environment.get_response(call)
        responses.append(str(response.content))
        if response.error:
            failed.append(index)
    writes = effective_writes(domain.episode_environment(task), task)
    no_op = [index for index, action in enumerate(actions)
             if action.requestor == "assistant" and action.name in domain.write_tools and index not in writes]
    return GoldReplay(environment, responses, failed, no_op, writes)


async def replay_reward(domain: Domain, task: Task, max_turns: int, max_errors: int) -> tuple[float, str]:
    """The reward tau2's evaluation gives the gold replay of `task` (`tau_bench_env.replay.GoldReplayAgent`)
    played with the `scripted` user simulator within `max_turns` policy turns and `max_errors` errors, and how
    the episode ended."""
    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeConfig
    from tau_bench_env.replay import GoldReplayAgent, play

    episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=max_turns, max_errors=max_errors))
    result = await play(episode, GoldReplayAgent(task))
    ended = result.termination or "none"
    if result.evaluator_fault:
        ended += f"; evaluator: {result.evaluator_fault}"
    elif result.evaluation_error:
        ended += f"; evaluator raised: {result.evaluation_error}"
    if result.user_error:
        ended += f"; user simulator: {result.user_error}"
    return float(result.reward), ended


def check_tasks(domain: Domain, tasks: list[Task], max_turns: int, max_errors: int) -> CheckReport:
    """Check every task of `tasks` (see the module docstring); the domain's tasks file has passed its
    file-level checks already."""
    from tau_bench_env.gold_limits import gold_solution

    report = CheckReport()
    for task in tasks:
        report.checked += 1
        solution = gold_solution(domain, task)
        reasons = replay_gold(domain, task).faults(task) + limit_faults(solution, max_turns, max_errors)
        report.faults += [TaskFault(str(task.id), reason) for reason in reasons]
        unsolved = asyncio.run(gold_score_fault(domain, task, solution, max_turns, max_errors))
        if unsolved is not None:
            report.faults.append(TaskFault(str(task.id), unsolved, unsolvable=True))
    return report


def limit_faults(solution: tuple[int, int], max_turns: int, max_errors: int) -> list[str]:
    """Why a gold solution of ``(turns, errors)`` (`tau_bench_env.gold_limits.gold_solution`) does not fit an episode
    of `max_turns` policy turns and `max_errors` errors; [] when it fits."""
    turns, errors = solution
    reasons = []
    if turns > max_turns:
        reasons.append(f"the gold solution takes {turns} policy turns, more than max_turns {max_turns}")
    if errors >= max_errors:
        reasons.append(f"the gold solution makes {errors} tool errors, max_errors is {max_errors}")
    return reasons


async def gold_score_fault(domain: Domain, task: Task, solution: tuple[int, int], max_turns: int,
                           max_errors: int) -> str | None:
    """Why tau2 scores `task`'s gold replay (`replay_reward`, with limits wide enough for its gold `solution`,
    ``(turns, errors)``) below 1.0, or None when it scores 1.0."""
    turns, errors = solution
    reward, ended = await replay_reward(domain, task, max(max_turns, turns), max(max_errors, errors + 1))
    if reward >= 1.0:
        return None
    what = "the gold replay" if gold_actions_of(task) else "doing nothing (the task has no gold actions)"
    return f"tau2 scores {what} {reward:g} (ended: {ended})"


def check_task_file(domain_type: str, tasks_file: Path, split_file: Path | None, split: str,
                    max_turns: int, max_errors: int) -> CheckReport:
    """`check_tasks` over the tasks of `split` in a tasks file in tau2's format, played in the environment of the
    registered domain `domain_type` (built with its default params: any domain, tau2's or one's own).

    Raises:
        TaskFileError: every file-level fault (`ctu.spec.schedule.task_file_ids`), or tasks of another domain
            (`ctu.components.domains.domain_mismatch`).
        ComponentError: `domain_type` is not a registered domain.
    """
    import json
    from types import SimpleNamespace

    from tau2.data_model.tasks import Task

    from ctu.components.domains import build_domain, domain_mismatch
    from ctu.spec.schedule import TaskFileError, task_file_ids

    ids = task_file_ids(SimpleNamespace(tasks_file=str(tasks_file), split_file=None if split_file is None else str(split_file)),
                        split)
    wanted = set(ids)
    tasks = [Task.model_validate(task) for task in json.loads(Path(tasks_file).read_text(encoding="utf-8"))
             if str(task["id"]) in wanted]
    domain = build_domain(domain_type, {})
    if mismatch := domain_mismatch(domain, tasks):
        raise TaskFileError("domain", f"{tasks_file} is not of domain {domain_type!r}: {mismatch}")
    return check_tasks(domain, tasks, max_turns, max_errors)


CHECK_VERSION = 2
"""Part of every cached check's key: raise it when what `check_tasks` checks changes."""


def spec_task_file_issues(spec: Spec) -> tuple[list[SpecIssue], list[SpecIssue]]:
    """`check_task_file` on every tasks file a spec's data sources name (training, validation, test sets), with
    the spec's `environment.max_turns` and `max_errors`, as ``(errors, warnings)`` at each source's
    ``domain.tasks_file``: an error names the tasks no policy can solve (`TaskFault.unsolvable`), a warning the
    other faults. A result is cached under ``$CTU_CACHE_DIR`` by the files' SHA-256, the domain, split and
    limits, so a second `ctu validate` of the same files replays nothing."""
    import hashlib
    import json

    from ctu.models.cache import cache_dir
    from ctu.spec import SpecIssue

    sources = [(f"data.train.{i}", source) for i, source in enumerate(spec.data.train)]
    sources += [(path, source) for path, source in
                [("data.validation", spec.data.validation), *((f"data.test_sets.{n}", s) for n, s in spec.data.test_sets.items())]
                if source is not None]
    errors: list[SpecIssue] = []
    warnings: list[SpecIssue] = []
    for path, source in sources:
        params = source.domain.params
        tasks_file = getattr(params, "tasks_file", None)
        if tasks_file is None:
            continue
        split_file = getattr(params, "split_file", None)
        digest = hashlib.sha256()
        for part in (str(CHECK_VERSION), source.domain.type, source.split, str(spec.environment.max_turns),
                     str(spec.environment.max_errors)):
            digest.update(part.encode() + b"\0")
        for file in (tasks_file, split_file):
            digest.update(Path(file).read_bytes() if file is not None else b"-")
        cached = cache_dir() / "task_checks" / f"{digest.hexdigest()}.json"
        if cached.exists():
            faults = [TaskFault(**fault) for fault in json.loads(cached.read_text())]
        else:
            report = check_task_file(source.domain.type, Path(tasks_file), None if split_file is None else Path(split_file),
                                     source.split, spec.environment.max_turns, spec.environment.max_errors)
            faults = report.faults
            cached.parent.mkdir(parents=True, exist_ok=True)
            temporary = cached.with_suffix(".tmp")
            temporary.write_text(json.dumps([asdict(fault) for fault in faults]))
            temporary.replace(cached)
        for unsolvable, found, title in ((True, errors, "tasks no policy can solve"),
                                         (False, warnings, "gold actions that fail or change nothing")):
            chosen = [fault for fault in faults if fault.unsolvable is unsolvable]
            if chosen:
                listed = "; ".join(f"task {fault.task_id}: {fault.reason}" for fault in chosen[:10])
                more = f" (and {len(chosen) - 10} more: `ctu tasks check` lists all)" if len(chosen) > 10 else ""
                found.append(SpecIssue(f"{path}.domain.tasks_file", f"{title}: {listed}{more}"))
    return errors, warnings
