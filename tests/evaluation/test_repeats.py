"""`ctu eval --repeats N`: each repeat on samples of its own, and each figure's mean, standard deviation and 95%
interval over the repeats."""

from __future__ import annotations

import statistics

import pytest
from rich.console import Console

from ctu.evaluation.repeats import across_repeats
from ctu.evaluation.report import report_table, summarize
from ctu.evaluation.runner import EvalPlan

T_975_DF2 = 4.302653  # Student's t, 97.5th percentile, 2 degrees of freedom (any statistics table)


def line(test_set: str, task: str, sample: int, success: bool) -> dict:
    return {"test_set": test_set, "domain": "retail", "task_id": task, "sample": sample, "raw_reward": float(success),
            "reward": float(success), "policy_turns": 2, "termination": "user_stop"}


def test_each_repeat_is_scored_on_its_own_samples_and_the_spread_is_students():
    # 3 repeats x 2 samples of 2 tasks; repeat r succeeds on r + 1 of its 4 episodes in `retail`, on all in `airline`
    lines = [line("retail", task, sample, index < sample // 2 + 1)
             for sample in range(6) for index, task in enumerate(["a", "b"])]
    lines += [line("airline", "c", sample, True) for sample in range(6)]
    found = across_repeats(lines, samples=2, repeats=3)
    retail = found["by_test_set"]["retail"]["success_rate"]
    assert retail["values"] == [0.5, 1.0, 1.0]
    values = retail["values"]
    sd = statistics.stdev(values)
    assert retail["mean"] == pytest.approx(statistics.mean(values)) and retail["sd"] == pytest.approx(sd)
    assert retail["low"] == pytest.approx(statistics.mean(values) - T_975_DF2 * sd / 3 ** 0.5)
    assert retail["high"] == pytest.approx(statistics.mean(values) + T_975_DF2 * sd / 3 ** 0.5)
    assert found["by_test_set"]["retail"]["pass^2"]["values"] == [0.5, 1.0, 1.0]
    airline = found["by_test_set"]["airline"]["success_rate"]
    assert (airline["mean"], airline["sd"], airline["low"], airline["high"]) == (1.0, 0.0, 1.0, 1.0)
    assert "overall" in found["by_test_set"] and found["count"] == 3 and found["samples_per_repeat"] == 2


def test_the_plan_gives_each_repeat_samples_of_its_own_and_the_table_shows_the_spread_in_80_columns():
    plan = EvalPlan({"retail": []}, samples=2, repeats=3)
    assert plan.episodes() == []
    from ctu.runners.task_rows import TaskRow

    row = TaskRow("retail", "7")
    assert [k for _, _, k in EvalPlan({"retail": [row]}, samples=2, repeats=3).episodes()] == [0, 1, 2, 3, 4, 5]
    lines = [line("retail", task, sample, (sample + index) % 3 == 0) for sample in range(6) for index, task in enumerate("ab")]
    report = {"spec": "retail_8b_taxonomy", "policy": "http://127.0.0.1:8000/v1", **summarize(lines, 6),
              "repeats": across_repeats(lines, 2, 3)}
    console = Console(width=80, record=True)
    console.print(report_table(report))
    text = console.export_text()
    assert "success, 3 repeats" in text and "95% interval" in text and "pass^2, 3 repeats" in text
    assert all(len(row) <= 80 for row in text.splitlines())
