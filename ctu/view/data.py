"""What `ctu view` shows, read from the folders it is given: each folder's curves, its evaluations' per-task results,
the pair of evaluations compared, and the episodes, as one JSON-ready mapping (`page_data`).

A folder is a run directory (``spec.resolved.yaml``: its ``metrics.jsonl`` and ``trajectories/<phase>_step<N>.jsonl``,
each evaluation step one column of the task table) or a `ctu eval` folder (``eval.json`` and ``trajectories.jsonl``:
one column). Trajectory lines of any ctu version load: a text-mode turn's parsed tool calls (``parsed``) are used where
a line has them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypedDict

from ctu.errors import CtuError
from ctu.jsonl import text_lines
from tau_bench_env.outcome import CHECK_BASIS, SCORED_ENDINGS

CURVE_KEYS = re.compile(r"success|reward_mean|avg_reward|fault|infra_error|logprob_gap_mean")
"""Which of ``metrics.jsonl``'s figures the page draws by step: success, reward, user faults, infrastructure errors
and the sampler-trainer log-probability gap."""
MAX_EPISODES = 3000
"""Most episodes one page embeds by default (``ctu view --max-episodes``): evaluation episodes first, then training
ones spread evenly over the steps; the page says how many of how many it holds."""
STEP_FILE = re.compile(r"(?P<phase>[a-z]+)_step(?P<step>\d+)\.jsonl$")


class PageData(TypedDict):
    """The page's data (`page_data`), embedded in it as JSON."""

    sources: list[dict[str, object]]
    columns: list[dict[str, object]]
    comparison: dict[str, object] | None
    prompts: list[str]
    check_names: dict[str, str]
    episodes: list[dict[str, object]]
    episodes_total: int


class ViewError(CtuError):
    """A folder `ctu view` cannot read: neither a run directory nor a `ctu eval` folder."""


@dataclass
class Column:
    """One evaluation: a `ctu eval` folder, or one evaluation step of a run.

    Attributes:
        id: unique in the page (``<source>:<name>``).
        label: as shown (the folder's name, with the step for a run's).
        lines: its trajectory lines.
        contents: its tasks' recorded contents (`ctu.evaluation.comparison.report_contents`).
    """

    id: str
    label: str
    lines: list[dict[str, object]] = field(default_factory=list)
    contents: dict[str, str] = field(default_factory=dict)
    """``{"domain/task_id": scenario digest}`` where the evaluation recorded them (``eval.json``), else empty."""

    @cached_property
    def tasks(self) -> dict[str, list[int]]:
        """Each task's ``[successes, trials]`` in `lines` (`task_results`), counted once."""
        return task_results(self.lines)


@dataclass
class Source:
    """One folder given to `ctu view`: its curves (runs), its evaluations, its training lines."""

    label: str
    kind: str
    path: Path
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    columns: list[Column] = field(default_factory=list)
    training: list[dict[str, object]] = field(default_factory=list)


def read_lines(path: Path) -> Iterator[dict[str, object]]:
    """The JSON lines of `path`; a line cut short (a run killed mid-write) is skipped."""
    for text in text_lines(path):
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict):
            yield line


def trajectory_lines(path: Path) -> list[dict[str, object]]:
    """The trajectory lines of `path` (`read_lines`) that are episodes as ctu writes them
    (`ctu.rollout.trajectories.is_episode_line`); any other line is skipped, as a cut one is."""
    from ctu.rollout.trajectories import is_episode_line

    return [line for line in read_lines(path) if is_episode_line(line)]


def read_source(path: Path, label: str) -> Source:
    """The folder at `path` as a `Source`.

    Raises:
        ViewError: `path` holds neither a run (``spec.resolved.yaml``) nor an evaluation (``eval.json``).
    """
    if (path / "eval.json").is_file():
        column = Column(f"{label}:eval", label, trajectory_lines(path / "trajectories.jsonl")
                        if (path / "trajectories.jsonl").is_file() else [], recorded_contents(path / "eval.json"))
        return Source(label, "eval", path, columns=[column])
    if not (path / "spec.resolved.yaml").is_file():
        raise ViewError(f"{path} is neither a run directory (spec.resolved.yaml) nor a `ctu eval` folder (eval.json)")
    source = Source(label, "run", path, curves=read_curves(path / "metrics.jsonl"))
    for file in sorted((path / "trajectories").glob("*_step*.jsonl")):
        match = STEP_FILE.search(file.name)
        if match is None:
            continue
        step = int(match["step"])
        if match["phase"] == "eval":
            source.columns.append(Column(f"{label}:step{step}", f"{label} step {step}", trajectory_lines(file)))
        else:
            source.training += [{**line, "step": line.get("step", step)} for line in trajectory_lines(file)]
    return source


def read_curves(path: Path) -> dict[str, list[tuple[int, float]]]:
    """``{figure: [(step, value), ...]}`` of `CURVE_KEYS`' figures in a run's ``metrics.jsonl`` ({} without one)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    if not path.is_file():
        return curves
    for row in read_lines(path):
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for key, value in row.items():
            if CURVE_KEYS.search(key) and isinstance(value, int | float) and not isinstance(value, bool):
                curves.setdefault(key, []).append((step, float(value)))
    return curves


def task_results(lines: Sequence[dict[str, object]]) -> dict[str, list[int]]:
    """``{"domain/task_id": [successes, trials]}`` of `lines`, as ``eval.json``'s ``by_task`` counts them
    (`ctu.evaluation.report.figures`: infrastructure errors left out)."""
    from ctu.evaluation.report import figures

    by_task = figures(list(lines)).get("by_task", {})
    return {task: [int(counts[0]), int(counts[1])] for task, counts in by_task.items()}


def page_data(paths: Sequence[Path], max_episodes: int = MAX_EPISODES) -> PageData:
    """Everything the page shows of the folders `paths`, JSON-ready: each source's curves, the columns (its
    evaluations) with each task's ``[successes, trials]``, the comparison of the first two columns when there are
    two or more (`compare_columns`), and up to `max_episodes` episodes (`episode_rows`), the system prompts they
    share stored once.

    Raises:
        ViewError: a folder cannot be read.
    """
    labels = _labels(paths)
    sources = [read_source(Path(path), label) for path, label in zip(paths, labels, strict=True)]
    columns = [column for source in sources for column in source.columns]
    prompts: list[str] = []
    episodes, total = episode_rows(sources, max_episodes, prompts)
    return {
        "sources": [{"label": s.label, "kind": s.kind, "path": str(s.path), "curves": s.curves} for s in sources],
        "columns": [{"id": c.id, "label": c.label, "tasks": c.tasks} for c in columns],
        "comparison": compare_columns(columns[0], columns[1]) if len(columns) >= 2 else None,
        "prompts": prompts,
        "check_names": CHECK_BASIS,
        "episodes": episodes,
        "episodes_total": total,
    }


def recorded_contents(eval_json: Path) -> dict[str, str]:
    """Every test set's recorded task contents of an ``eval.json`` (`report_contents`; {} when it is no evaluation
    result `read_report` accepts)."""
    from ctu.evaluation.comparison import report_contents
    from ctu.evaluation.report import read_report

    try:
        report = read_report(eval_json)
    except ValueError:
        return {}
    return {task: digest for name in report["by_test_set"] for task, digest in report_contents(report, name).items()}


def compare_columns(baseline: Column, other: Column) -> dict[str, object]:
    """`other` against `baseline` as `ctu compare` pairs them: over the tasks `pair_tasks` compares (the same task
    with the same recorded content), with `paired_bootstrap`'s interval, the tasks whose success rate changed
    (``flipped``, sorted) and what was left out (``left_out``: a line, or None); ``tasks`` 0 and no figures when
    none is compared."""
    from ctu.evaluation.comparison import pair_tasks, paired_bootstrap

    first, second = baseline.tasks, other.tasks
    pairing = pair_tasks(first, second, baseline.contents, other.contents)
    result = paired_bootstrap(first, second, tasks=pairing.compared)
    flipped = [task for task in pairing.compared if first[task][0] / first[task][1] != second[task][0] / second[task][1]]
    tasks, difference, low, high = result if result is not None else (0, None, None, None)
    return {"baseline": baseline.id, "other": other.id, "tasks": tasks, "difference": difference, "low": low,
            "high": high, "flipped": flipped, "left_out": pairing.left_out()}


def episode_rows(sources: Sequence[Source], limit: int, prompts: list[str]) -> tuple[list[dict[str, object]], int]:
    """``(rows, total)``: up to `limit` episodes of `sources` as the page lists them (`episode_row`), every
    evaluation's first, then training ones spread evenly over the steps; `total`, how many there are."""
    evaluated = [(column.id, line) for source in sources for column in source.columns for line in column.lines]
    trained = [(f"{source.label}:train", line) for source in sources for line in source.training]
    total = len(evaluated) + len(trained)
    kept = evaluated[:limit]
    room = limit - len(kept)
    if room > 0 and trained:
        stride = max(1, -(-len(trained) // room))
        kept += trained[::stride][:room]
    index: dict[str, int] = {}
    return [episode_row(number, column, line, prompts, index) for number, (column, line) in enumerate(kept)], total


def episode_row(number: int, column: str, line: dict[str, object], prompts: list[str],
                index: dict[str, int]) -> dict[str, object]:
    """One trajectory line as the page's episode: its outcome, the tools it called, and its messages with the
    system prompt replaced by its number in `prompts` (each distinct prompt stored once; `index` finds it) and each
    policy turn's reasoning (a thinking template's, never part of the conversation) on its message as ``reasoning``."""
    from ctu.metrics import is_success

    listed = line.get("messages")
    messages = [dict(m) for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
    for message in messages:
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            text = str(message.pop("content"))
            if text not in index:
                index[text] = len(prompts)
                prompts.append(text)
            message["prompt"] = index[text]
    reasoning = line.get("reasoning")
    if isinstance(reasoning, list) and reasoning:  # each policy turn's, in order: its last assistant messages
        turns = [m for m in messages if m.get("role") == "assistant"][-len(reasoning):]
        for message, text in zip(turns, reasoning[-len(turns):] if turns else [], strict=True):
            if text:
                message["reasoning"] = text
    keys = ("step", "phase", "domain", "task_id", "test_set", "reward", "raw_reward", "termination", "reward_breakdown",
            "reward_components", "checks", "failed_actions", "user_fault", "user_fault_kind", "infra_error", "evaluation_error", "judge", "error", "tool_errors", "parse_failures",
            "off_template_turns")
    row: dict[str, object] = {key: line.get(key) for key in keys}
    raw = line.get("raw_reward")
    success = isinstance(raw, int | float) and is_success(float(raw))
    row.update(id=number, column=column, task=f"{line.get('domain')}/{line.get('task_id')}", messages=messages,
               success=success, failure=None if success else failure(line), tools=sorted(called_tools(messages)))
    return row


def failure(line: dict[str, object]) -> str:
    """Why a failed episode failed, in tau2's evaluator's terms: ``infrastructure error`` (the sampler failed; not
    the policy's), ``evaluator raised: <exception>`` (tau2's evaluator raised on the episode's own state, scored 0
    as tau2 scores it: `tau_bench_env.evaluation_faults`), ``terminated prematurely: <termination>`` (tau2 scores it
    0 without checking anything: `tau_bench_env.outcome.SCORED_ENDINGS`), ``failed check: DB, ACTION`` (the kinds of tau2's checks it did not pass, by reward basis:
    `tau_bench_env.outcome.CHECK_BASIS`), or ``reward below success`` (checks passed, or not recorded: e.g. a partial reward)."""
    if line.get("infra_error"):
        return "infrastructure error"
    if line.get("evaluation_error"):
        return f"evaluator raised: {line['evaluation_error']}"
    termination = line.get("termination")
    if termination is not None and termination not in SCORED_ENDINGS:
        return f"terminated prematurely: {termination}"
    checks = line.get("checks")
    failed = [CHECK_BASIS.get(str(kind), str(kind)) for kind, score in checks.items()
              if isinstance(score, int | float) and score < 1.0] if isinstance(checks, dict) else []
    return f"failed check: {', '.join(failed)}" if failed else "reward below success"



def called_tools(messages: Sequence[dict[str, object]]) -> set[str]:
    """The names of the tools the policy called in `messages`: native turns' ``tool_calls``, text-mode turns'
    ``parsed`` calls."""
    names: set[str] = set()
    for message in messages:
        if message.get("role") != "assistant":
            continue
        parsed = message.get("parsed")
        calls = message.get("tool_calls") or (parsed.get("tool_calls") if isinstance(parsed, dict) else None)
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return names


def _labels(paths: Sequence[Path]) -> list[str]:
    """Each folder's name, made unique with its parent's where two share one."""
    names = [Path(path).name or str(path) for path in paths]
    return [f"{Path(path).parent.name}/{name}" if names.count(name) > 1 else name for path, name in zip(paths, names, strict=True)]
