"""`ctu tasks check`: every task's gold actions replayed from its initial state as tau2 would score them, on a
domain of tau2's (mock), the worked example's own domain, and a retail task file spoilt in each way the check
names (a tool error, a write that changes nothing, a replay tau2 scores 0, a solution longer than the turns
allowed)."""

from __future__ import annotations

import json
from pathlib import Path

from tau2.utils import DATA_DIR

from .conftest import REPO
from .support.cli import ctu_here as ctu

MOCK = DATA_DIR / "tau2" / "domains" / "mock"


def test_the_worked_examples_tasks_are_sound():
    example = REPO / "examples" / "healthcare"
    result = ctu("tasks", "check", str(example / "tasks.json"), "--domain", "healthcare",
                 "--split-file", str(example / "split_tasks.json"), "-i", str(example / "domain.py"))
    assert result.returncode == 0 and "14 of 14 task(s) sound" in result.stdout, result.stdout + result.stderr


def test_tau2s_mock_tasks_hold_one_whose_gold_solution_is_missing():
    """Found in tau2 26.3's own data: mock's `update_task_with_history_and_env_assertions` asserts a task's status
    is `completed`, and gives no gold action that completes it."""
    result = ctu("tasks", "check", str(MOCK / "tasks.json"), "--domain", "mock", "--split-file", str(MOCK / "split_tasks.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "task update_task_with_history_and_env_assertions: tau2 scores doing nothing (the task has no gold actions) 0" in result.stdout
    assert "8 of 9 task(s) sound; 1 failed: update_task_with_history_and_env_assertions" in result.stdout


def test_each_fault_of_a_spoilt_retail_task_file_is_named_with_its_task(tmp_path: Path):
    tasks = {task["id"]: task for task in json.loads((DATA_DIR / "tau2" / "domains" / "retail" / "tasks.json").read_text())}
    missing = json.loads(json.dumps(tasks["1"]))
    missing["id"] = "missing-order"
    [index] = [i for i, a in enumerate(missing["evaluation_criteria"]["actions"]) if "order_id" in a["arguments"]][:1]
    missing["evaluation_criteria"]["actions"][index]["arguments"]["order_id"] = "#W0000000"  # no such order
    idle = json.loads(json.dumps(tasks["0"]))
    idle["id"] = "idle-write"  # its exchange done twice: the second changes nothing (the items are exchanged)
    write = next(a for a in idle["evaluation_criteria"]["actions"] if a["name"].startswith("exchange"))
    idle["evaluation_criteria"]["actions"].append({**write, "action_id": "again"})
    file = tmp_path / "tasks.json"
    file.write_text(json.dumps([tasks["0"], missing, idle]))
    result = ctu("tasks", "check", str(file), "--domain", "retail")
    output = result.stdout
    assert result.returncode == 1, output + result.stderr
    assert f"task missing-order: gold action {index} (" in output and ") fails: Error: Order not found" in output
    assert "task idle-write: gold action" in output and "is a write that changes nothing" in output
    assert "task 0:" not in output and "1 of 3 task(s) sound; 2 failed: missing-order, idle-write" in output
    shorter = ctu("tasks", "check", str(file), "--domain", "retail", "--max-turns", "5")  # 5 calls, then the closing
    assert shorter.returncode == 1 and "task 0: the gold solution takes 6 policy turns, more than max_turns 5" in shorter.stdout


def test_validate_replays_the_task_files_a_spec_names_once_per_version_of_them(tmp_path: Path, monkeypatch):
    """A task no policy can solve (tau2's mock task without a gold solution) is an error; a gold action that fails
    while tau2 still scores the replay 1.0 (as in 19 of tau2's own retail tasks) a warning."""
    import yaml

    from .conftest import MINIMAL_SPEC

    tasks = json.loads((MOCK / "tasks.json").read_text())
    file = tmp_path / "tasks.json"
    file.write_text(json.dumps(tasks))
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["data"] = {"train": [{"domain": {"type": "mock", "tasks_file": str(file)}, "split": "base"}]}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    cache = tmp_path / "cache"
    monkeypatch.setenv("CTU_CACHE_DIR", str(cache))
    unsolvable = "data.train.0.domain.tasks_file: tasks no policy can solve: task update_task_with_history_and_env_assertions"
    first = ctu("validate", str(spec))
    assert first.returncode == 2 and unsolvable in " ".join(first.stderr.split()), first.stderr
    assert len(list((cache / "task_checks").glob("*.json"))) == 1
    again = ctu("validate", str(spec))  # from the cache: the same verdict
    assert again.returncode == 2 and unsolvable in " ".join(again.stderr.split())
    solvable = [task for task in tasks if task["id"] != "update_task_with_history_and_env_assertions"]
    solvable[0]["evaluation_criteria"]["actions"].insert(0, {"action_id": "lookup", "name": "get_users", "arguments": {"x": 1}})
    file.write_text(json.dumps(solvable))  # a new version, checked afresh: a failing call tau2 still scores 1.0
    fixed = ctu("validate", str(spec))
    assert fixed.returncode == 0, fixed.stderr
    assert "gold actions that fail or change nothing: task " in " ".join(fixed.stderr.split())
    assert len(list((cache / "task_checks").glob("*.json"))) == 2


def test_tau2s_own_retail_airline_and_telecom_tasks_check_as_the_readme_says():
    """The README's findings on tau2 26.3's own task sets (`--max-turns 80 --max-errors 50`): airline and telecom
    sound, 19 retail tasks with gold calls that fail while tau2 still scores them 1.0 (none unsolvable)."""
    from ctu.components.domains import build_domain
    from ctu.tasks.check import check_tasks

    found = {}
    for name in ("retail", "airline", "telecom"):
        domain = build_domain(name, {})
        report = check_tasks(domain, domain.tasks("base"), 80, 50)
        found[name] = (report.checked, len(report.failed_ids), sum(fault.unsolvable for fault in report.faults))
    assert found == {"retail": (114, 19, 0), "airline": (50, 0, 0), "telecom": (114, 0, 0)}


def test_a_file_that_is_no_task_set_is_bad_input_with_every_fault_listed_at_once(tmp_path: Path):
    """Exit 2 and each fault named in one run, never the crash path: not JSON; an entry without an id, an id twice
    and a task tau2 rejects in one file, with a split file naming tasks the file lacks; tasks of another domain."""
    (tmp_path / "not.json").write_text("[{")
    result = ctu("tasks", "check", str(tmp_path / "not.json"), "--domain", "mock")
    assert result.returncode == 2 and "cannot read" in result.stderr and "traceback" not in result.stderr
    good = json.loads((MOCK / "tasks.json").read_text())[0]
    rejected = {**good, "id": "bad-scenario", "user_scenario": 5}
    file = tmp_path / "tasks.json"
    file.write_text(json.dumps([good, {k: v for k, v in good.items() if k != "id"}, good, rejected]))
    (tmp_path / "split.json").write_text(json.dumps({"train": [good["id"], "nowhere"], "test": ["gone"]}))
    result = ctu("tasks", "check", str(file), "--domain", "mock", "--split-file", str(tmp_path / "split.json"))
    text = " ".join(result.stderr.split())
    assert result.returncode == 2 and "traceback" not in text, result.stdout + result.stderr
    assert "entries without an `id`" in text and "at index 1" in text
    assert f"holds task id(s) more than once: {good['id']}" in text and "Task model rejects task bad-scenario" in text
    assert "split 'train' names task(s)" in text and "lacks: nowhere" in text and "split 'test' names task(s)" in text
    airline = ctu("tasks", "check", str(DATA_DIR / "tau2" / "domains" / "airline" / "tasks.json"), "--domain", "retail")
    named = " ".join(airline.stderr.split())
    assert airline.returncode == 2 and airline.stdout == "", airline.stdout
    assert "is not of domain 'retail'" in named and "call tools it lacks (book_reservation" in named
    assert "they are tools of airline: --domain airline?" in named
