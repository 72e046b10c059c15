"""`ctu compare` says whether a difference is real: a paired bootstrap over tasks of the difference in success
rate, a table that reads in 80 columns, and a flag on test sets whose results hold different tasks."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.evaluation.comparison import paired_bootstrap
from ctu.evaluation.report import figures

TASKS = 60


def result(policy: str, skill: float, seed: int, trials: int = 4, tasks: list[str] | None = None) -> dict:
    """An `eval.json` of `policy` on retail: each task has its own difficulty (the same for every policy, seeded by
    the task), a trial succeeds with probability skill x (1 - difficulty), trials drawn with `seed`."""
    draw = random.Random(seed)
    lines = []
    for task in tasks or [str(i) for i in range(TASKS)]:
        difficulty = random.Random(task).random()
        lines += [{"domain": "retail", "task_id": task, "raw_reward": float(draw.random() < skill * (1 - difficulty)),
                   "reward": 0.0, "policy_turns": 4, "termination": "user_stop"} for _ in range(trials)]
    group = figures(lines)
    ids = [f"retail/{task}" for task in tasks or [str(i) for i in range(TASKS)]]
    return {"spec": "retail", "policy": policy, "samples_per_task": trials, "by_test_set": {"retail": group},
            "overall": group, "test_set_sources": {"retail": {"domain": "retail", "split": "test", "tasks_file": None,
                                                              "tasks_sha256": None, "task_ids": ids}}}


def test_the_interval_is_the_bootstrap_of_per_task_differences():
    base, other = result("a", 0.5, 1)["overall"]["by_task"], result("b", 0.9, 2)["overall"]["by_task"]
    tasks, difference, low, high = paired_bootstrap(base, other)
    deltas = [other[t][0] / other[t][1] - base[t][0] / base[t][1] for t in base]
    direct = sum(deltas) / len(deltas)
    spread = math.sqrt(sum((d - direct) ** 2 for d in deltas) / len(deltas) / len(deltas))  # the mean's standard error
    assert tasks == TASKS and difference == pytest.approx(direct)
    assert low == pytest.approx(direct - 1.96 * spread, abs=0.02) and high == pytest.approx(direct + 1.96 * spread, abs=0.02)
    same = {"t1": [1, 2], "t2": [0, 2]}
    assert paired_bootstrap(same, same) == (2, 0.0, 0.0, 0.0)
    assert paired_bootstrap({"x": [1, 1]}, {"y": [1, 1]}) is None  # no task in common


def write(folder: Path, report: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps(report))
    return folder


def compare(*folders: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", "compare", *map(str, folders)], capture_output=True,
                          text=True, env={**__import__("os").environ, "COLUMNS": "80"}, timeout=120)


def test_compare_calls_the_same_policy_equal_and_a_better_one_better_in_80_columns(tmp_path: Path):
    base = write(tmp_path / "base", result("base", 0.5, 1))
    again = write(tmp_path / "again", result("base-again", 0.5, 2))  # the same policy, other samples
    better = write(tmp_path / "better", result("better", 0.95, 3))
    shown = compare(base, again, better)
    assert shown.returncode == 0, shown.stderr
    assert all(len(line) <= 80 for line in shown.stdout.splitlines()), shown.stdout
    row = next(line for line in shown.stdout.splitlines() if line.startswith("│ excludes 0"))
    assert [cell.strip() for cell in row.split("│")[2:5]] == ["", "no", "yes"]
    assert "base-again" in shown.stdout and "success - base" in shown.stdout
    assert "different tasks" not in shown.stdout


def test_results_on_different_tasks_under_one_name_are_flagged_and_compared_on_the_shared_ones(tmp_path: Path):
    base = write(tmp_path / "base", result("base", 0.5, 1))
    fewer = write(tmp_path / "fewer", result("fewer", 0.5, 2, tasks=[str(i) for i in range(40, 80)]))
    shown = compare(base, fewer)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert ("different tasks under one name: retail: fewer against base: 20 task(s) compared; left out: 40 only the "
            "baseline evaluated (retail/0, retail/1, retail/10, ...); 20 only the other evaluated (retail/60, retail/61, "
            "retail/62, ...)") in text
    old = result("old", 0.5, 3)
    del old["test_set_sources"], old["by_test_set"]["retail"]["by_task"]  # written before ctu recorded them
    plain = compare(base, write(tmp_path / "old", old))
    assert plain.returncode == 0 and "success - base" not in plain.stdout and "old" in plain.stdout


def test_compare_says_what_it_cannot_compare(tmp_path: Path):
    """Two results of one label are two columns, never one; one result, or none sharing a test set with the
    baseline, is refused; a result without a common test set is named."""
    base = write(tmp_path / "base", result("ckpt", 0.5, 1))
    same_label = write(tmp_path / "same_label", result("ckpt", 0.5, 2, tasks=[str(i) for i in range(40, 80)]))
    shown = compare(base, same_label)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"ckpt ({same_label}) against ckpt ({base}): 20 task(s) compared" in text.replace("│", "")
    alone = compare(base)
    assert alone.returncode == 2 and "needs two or more results" in alone.stderr
    airline = result("airline-only", 0.5, 3)
    airline["by_test_set"] = {"airline": airline["by_test_set"].pop("retail")}
    other = write(tmp_path / "other", airline)
    apart = compare(base, other)
    assert apart.returncode == 2 and "airline-only shares no test set with the baseline ckpt" in " ".join(apart.stderr.split())
    mixed = compare(base, other, write(tmp_path / "better", result("better", 0.9, 4)))
    assert mixed.returncode == 0 and "airline-only shares no test set" in " ".join(mixed.stderr.split())
    assert "success - ckpt" in mixed.stdout


def with_contents(report: dict, changed: set[str] = frozenset()) -> dict:
    """`report` with each task's recorded content (`ctu eval`'s ``task_scenarios``), other for the ids `changed`."""
    ids = [task.split("/", 1)[1] for task in report["by_test_set"]["retail"]["by_task"]]
    report["test_set_sources"]["retail"]["task_scenarios"] = {i: f"{'other' if i in changed else 'same'}-{i}" for i in ids}
    return report


def test_tasks_of_the_same_id_but_other_content_are_never_compared_and_are_named(tmp_path: Path):
    """One rule, by task content, in `ctu compare` and `ctu view`: a task evaluated under the same id from another
    task file (another customer or database) is left out of the difference and named; none left: no difference."""
    from ctu.view.data import Column, compare_columns

    base = with_contents(result("base", 0.5, 1))
    moved = with_contents(result("moved", 0.9, 2), changed={str(i) for i in range(30)})
    shown = compare(write(tmp_path / "base", base), write(tmp_path / "moved", moved))
    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and ("retail: moved against base: 30 task(s) compared; left out: 30 with the same id "
                                      "but other content (retail/0, retail/1, retail/10, ...)") in text
    tasks, *_ = paired_bootstrap(base["overall"]["by_task"], moved["overall"]["by_task"],
                                 tasks=[f"retail/{i}" for i in range(30, 60)])
    assert tasks == 30
    everything = with_contents(result("everything", 0.9, 3), changed={str(i) for i in range(TASKS)})
    none = compare(write(tmp_path / "base2", base), write(tmp_path / "everything", everything))
    assert "0 task(s) compared" in " ".join(none.stdout.split()) and "success - base" not in none.stdout
    columns = [Column(name, name, [], {task: f"{name}-{task}" for task in report["overall"]["by_task"]})
               for name, report in (("retail", base), ("airline", everything))]
    for column, report in zip(columns, (base, everything)):
        column.__dict__["tasks"] = report["overall"]["by_task"]
    seen = compare_columns(*columns)
    assert seen["tasks"] == 0 and seen["difference"] is None and "60 with the same id but other content" in seen["left_out"]
