"""Whether two evaluations differ: a paired bootstrap over tasks of the difference in success rate, and whether
their test sets of one name hold the same tasks at all.

Why: pass^1 varies by about 3 points between identical evaluation runs of one policy (the Vertex AI tau2 report:
sigma ~ 3 over 5 runs, a retail gain of +0.7 "within noise"), so a point figure cannot tell a gain from noise.
Tasks differ far more in difficulty than trials of one task do, and both policies ran the same tasks, so the
difference is resampled by task, both results of a task together (a paired bootstrap; Efron & Tibshirani, "An
Introduction to the Bootstrap", 1993, ch. 13, percentile interval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RESAMPLES = 10_000
"""Bootstrap resamples per difference (the percentile interval's ends move by < 0.005 between seeds at this count
for 20-200 tasks)."""
LEVEL = 0.95
"""The interval's coverage."""


@dataclass(frozen=True)
class Difference:
    """The success rate of `policy` minus that of `baseline` on one test set, over the `tasks` both evaluated
    (each task weighed once: the mean over tasks of the difference of their success rates, which is the difference
    of success rates when every task ran as many trials), with its `LEVEL` paired-bootstrap interval."""

    test_set: str
    baseline: str
    policy: str
    tasks: int
    difference: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(baseline: Mapping[str, Sequence[int]], other: Mapping[str, Sequence[int]],
                     resamples: int = RESAMPLES, seed: int = 0, tasks: Sequence[str] | None = None
                     ) -> tuple[int, float, float, float] | None:
    """``(tasks, difference, low, high)``: the mean over the compared tasks of ``other``'s success rate minus
    ``baseline``'s, and its `LEVEL` percentile interval from `resamples` resamples of those tasks with replacement
    (seeded); None when no task is compared. Each mapping is ``{task: [successes, trials]}`` (``eval.json``'s
    ``by_task``); the compared tasks are `tasks` (a `Pairing`'s), else those both hold with a trial each."""
    import numpy as np

    common = sorted(tasks) if tasks is not None else pair_tasks(baseline, other).compared
    if not common:
        return None
    deltas = np.array([other[t][0] / other[t][1] - baseline[t][0] / baseline[t][1] for t in common])
    draws = np.random.default_rng(seed).integers(0, len(deltas), size=(resamples, len(deltas)))
    means = deltas[draws].mean(axis=1)
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return len(common), float(deltas.mean()), float(low), float(high)


@dataclass(frozen=True)
class Pairing:
    """Which tasks two evaluations of one test set are compared on: the same task (``domain/task_id``) with the
    same content (the scenario digest `ctu eval` records, `tau_bench_env.task_content.scenario_digest`: customer
    and starting database) where both recorded it, and at least one trial each. The one rule of `ctu compare`,
    `ctu view` and the chain's report.

    Attributes:
        compared: the tasks compared, sorted.
        changed: tasks of the same id whose content differs (never compared).
        only_baseline, only_other: tasks only one of the two evaluated (with a trial).
    """

    compared: tuple[str, ...]
    changed: tuple[str, ...] = ()
    only_baseline: tuple[str, ...] = ()
    only_other: tuple[str, ...] = ()

    def left_out(self) -> str | None:
        """What was not compared and why, in one line (None when every task was)."""
        parts = [f"{len(tasks)} {why} ({', '.join(tasks[:3])}{', ...' if len(tasks) > 3 else ''})"
                 for tasks, why in ((self.changed, "with the same id but other content"),
                                    (self.only_baseline, "only the baseline evaluated"),
                                    (self.only_other, "only the other evaluated")) if tasks]
        return "; ".join(parts) or None


def pair_tasks(baseline: Mapping[str, Sequence[int]], other: Mapping[str, Sequence[int]],
               baseline_contents: Mapping[str, str] | None = None, other_contents: Mapping[str, str] | None = None
               ) -> Pairing:
    """The `Pairing` of two evaluations' ``{task: [successes, trials]}`` (``eval.json``'s ``by_task``), with each
    one's ``{task: scenario digest}`` where known (`report_contents`; a task without one is paired by id)."""
    first = {task for task, counts in baseline.items() if counts[1]}
    second = {task for task, counts in other.items() if counts[1]}
    known_first, known_second = baseline_contents or {}, other_contents or {}
    changed = sorted(task for task in first & second
                     if task in known_first and task in known_second and known_first[task] != known_second[task])
    return Pairing(tuple(sorted(first & second - set(changed))), tuple(changed), tuple(sorted(first - second)),
                   tuple(sorted(second - first)))


def report_contents(report: Mapping[str, Any], name: str) -> dict[str, str]:
    """``{"domain/task_id": scenario digest}`` of the tasks `report` (an ``eval.json``) evaluated in test set `name`,
    as it recorded them (``test_set_sources.<name>.task_scenarios``; empty for results that recorded none)."""
    source = (report.get("test_set_sources") or {}).get(name) or {}
    scenarios = source.get("task_scenarios") or {}
    group = _group(report, name) or {}
    return {task: str(scenarios[task.split("/", 1)[-1]]) for task in group.get("by_task", {})
            if task.split("/", 1)[-1] in scenarios}


def _group(report: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    group = report["overall"] if name == "overall" else report["by_test_set"].get(name)
    return group if isinstance(group, Mapping) else None


def differences(reports: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[Difference]:
    """Each report after the first against the first (the baseline), on each test set of `names` both hold with
    per-task results (``by_task``; results written before ctu recorded them have none and get no difference), over
    the tasks `pair_tasks` compares (none: no difference)."""
    found: list[Difference] = []
    base = reports[0]
    for name in names:
        first = _group(base, name)
        for report in reports[1:]:
            group = _group(report, name)
            if first is None or group is None or "by_task" not in first or "by_task" not in group:
                continue
            pairing = pair_tasks(first["by_task"], group["by_task"], report_contents(base, name), report_contents(report, name))
            result = paired_bootstrap(first["by_task"], group["by_task"], tasks=pairing.compared)
            if result is not None:
                found.append(Difference(name, str(base["policy"]), str(report["policy"]), *result))
    return found


def task_mismatches(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per test set and report after the first whose tasks `pair_tasks` does not all compare with the
    baseline's: which were left out and why (the difference is over the others; none compared: no difference). For
    results that recorded no task contents, task files hashed differently under the same ids are flagged instead."""
    lines: list[str] = []
    base = reports[0]
    for name in dict.fromkeys(name for report in reports for name in report["by_test_set"]):
        first = _group(base, name)
        for report in reports[1:]:
            group = _group(report, name)
            if first is None or group is None or "by_task" not in first or "by_task" not in group:
                continue
            contents = report_contents(base, name), report_contents(report, name)
            pairing = pair_tasks(first["by_task"], group["by_task"], *contents)
            left_out = pairing.left_out()
            if left_out is not None:
                lines.append(f"{name}: {report['policy']} against {base['policy']}: {len(pairing.compared)} task(s) "
                             f"compared;\n  left out: {left_out}")
            elif not all(contents) and _sha256(base, name) != _sha256(report, name):
                lines.append(f"{name}: {report['policy']} and {base['policy']} read their tasks from different\n"
                             "  task files (same ids, contents not recorded)")
    return lines


def _sha256(report: Mapping[str, Any], name: str) -> object:
    return ((report.get("test_set_sources") or {}).get(name) or {}).get("tasks_sha256")


def label_apart(reports: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> list[dict[str, Any]]:
    """`reports` with each policy label made unique: a label two results share gets its result's `sources` entry
    (its path) appended, so a comparison keyed by label never merges two results (copies; `reports` unchanged)."""
    labels = [str(report["policy"]) for report in reports]
    return [{**report, "policy": label if labels.count(label) == 1 else f"{label} ({source})"}
            for report, label, source in zip(reports, labels, sources, strict=True)]


def without_common_test_set(reports: Sequence[Mapping[str, Any]]) -> list[int]:
    """The indices of the reports after the first that share no test set name with the first (the baseline):
    nothing of them can be compared with it."""
    first = set(reports[0]["by_test_set"]) if reports else set()
    return [index for index, report in enumerate(reports) if index and not first & set(report["by_test_set"])]
