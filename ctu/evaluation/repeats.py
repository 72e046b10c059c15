"""An evaluation repeated with fresh seeds (``ctu eval --repeats N``): how much success and pass^k move between
repeats, so a figure comes with its spread.

Repeat r of an evaluation with S samples per task runs samples r*S .. r*S + S - 1 of every task, each seeded with
the spec's seed plus its sample index (`ctu.evaluation.runner`): the first repeat is the evaluation without
``--repeats``, and each later one draws other user-simulator and policy samples. Per test set, each figure's mean
over the repeats, their standard deviation (n - 1), and the mean's 95% interval from Student's t with N - 1 degrees
of freedom (the Vertex AI tau2 report gives pass^1 as mean +- sigma over 5 runs the same way).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ctu.evaluation.report import figures

LEVEL = 0.95
"""The interval's coverage."""


def spread(values: Sequence[float]) -> dict[str, Any]:
    """``{"values", "mean", "sd", "low", "high"}`` of one figure over the repeats: `values` as given, their mean,
    sample standard deviation and the mean's `LEVEL` t-interval (``sd``, ``low``, ``high`` None for a single
    value)."""
    from statistics import mean, stdev

    from scipy.stats import t

    middle = mean(values)
    if len(values) < 2:
        return {"values": list(values), "mean": middle, "sd": None, "low": None, "high": None}
    sd = stdev(values)
    half = float(t.ppf((1 + LEVEL) / 2, len(values) - 1)) * sd / len(values) ** 0.5
    return {"values": list(values), "mean": middle, "sd": sd, "low": middle - half, "high": middle + half}


def across_repeats(lines: Sequence[Mapping[str, Any]], samples: int, repeats: int) -> dict[str, Any]:
    """``{"count", "samples_per_repeat", "by_test_set": {name: {figure: spread}}}`` for the success rate and
    pass^1 .. pass^`samples` of each test set (and ``overall`` with several), each repeat's figures from its own
    samples (`figures`); a repeat whose episodes were all infrastructure errors adds nothing to a figure."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for line in lines:
        groups[str(line["test_set"])].append(line)
    if len(groups) > 1:
        groups["overall"] = list(lines)
    result: dict[str, dict[str, Any]] = {}
    for name, group in groups.items():
        per_figure: dict[str, list[float]] = defaultdict(list)
        for repeat in range(repeats):
            chosen = [dict(line) for line in group if repeat * samples <= int(line["sample"]) < (repeat + 1) * samples]
            found = figures(chosen)
            if "success_rate" in found:
                per_figure["success_rate"].append(found["success_rate"])
                for k, value in found["pass^k"].items():
                    per_figure[f"pass^{k}"].append(value)
        result[name] = {figure: spread(values) for figure, values in per_figure.items()}
    return {"count": repeats, "samples_per_repeat": samples, "by_test_set": result}
