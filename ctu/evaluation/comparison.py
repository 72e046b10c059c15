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
                     resamples: int = RESAMPLES, seed: int = 0) -> tuple[int, float, float, float] | None:
    """``(tasks, difference, low, high)``: the mean over the tasks both hold of ``other``'s success rate minus
    ``baseline``'s, and its `LEVEL` percentile interval from `resamples` resamples of those tasks with replacement
    (seeded); None when they share no task. Each mapping is ``{task: [successes, trials]}`` (``eval.json``'s
    ``by_task``); a task with no trial is left out."""
    import numpy as np

    common = sorted(task for task in baseline.keys() & other.keys() if baseline[task][1] and other[task][1])
    if not common:
        return None
    deltas = np.array([other[t][0] / other[t][1] - baseline[t][0] / baseline[t][1] for t in common])
    draws = np.random.default_rng(seed).integers(0, len(deltas), size=(resamples, len(deltas)))
    means = deltas[draws].mean(axis=1)
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return len(common), float(deltas.mean()), float(low), float(high)


def _group(report: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    group = report["overall"] if name == "overall" else report["by_test_set"].get(name)
    return group if isinstance(group, Mapping) else None


def differences(reports: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[Difference]:
    """Each report after the first against the first (the baseline), on each test set of `names` both hold with
    per-task results (``by_task``; results written before ctu recorded them have none and get no difference)."""
    found: list[Difference] = []
    base = reports[0]
    for name in names:
        first = _group(base, name)
        for report in reports[1:]:
            group = _group(report, name)
            if first is None or group is None or "by_task" not in first or "by_task" not in group:
                continue
            result = paired_bootstrap(first["by_task"], group["by_task"])
            if result is not None:
                found.append(Difference(name, str(base["policy"]), str(report["policy"]), *result))
    return found


def task_mismatches(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per test set name whose results hold different tasks (by the task ids ``eval.json`` records, else by
    the tasks with per-task results) or come from differently hashed task files: such results are not comparable
    as they stand, and a difference is computed on their shared tasks only."""
    lines: list[str] = []
    names = dict.fromkeys(name for report in reports for name in report["by_test_set"])
    for name in names:
        held: dict[str, tuple[frozenset[str], object]] = {}
        for report in reports:
            source = (report.get("test_set_sources") or {}).get(name) or {}
            group = report["by_test_set"].get(name) or {}
            ids = source.get("task_ids") or list(group.get("by_task", {}))
            if ids:
                held[str(report["policy"])] = (frozenset(ids), source.get("tasks_sha256"))
        if len(held) < 2:
            continue
        (first, (tasks, digest)), *rest = held.items()
        for policy, (other_tasks, other_digest) in rest:
            if other_tasks != tasks:
                lines.append(f"{name}: {policy} ran {len(other_tasks)} task(s), {first} {len(tasks)};\n"
                             f"  {len(other_tasks & tasks)} in common (the difference is over those)")
            elif digest != other_digest:
                lines.append(f"{name}: {policy} and {first} read their tasks from different\n"
                             "  task files (same ids, other contents)")
    return lines


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
