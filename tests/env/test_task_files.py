"""Task sets from files: a tau2 domain's tasks read from a tasks file and a split file in tau2's format (a revised
task set), scored by tau2's own evaluator, on both backends' rows and checked by `ctu validate`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.spec import SpecError, spec_from_dict
from ctu.spec.schedule import schedule
from tau_bench_env.env import shared_domain
from tau_bench_env.episode import Episode
from tau_bench_env.outcome import EpisodeConfig
from tau_bench_env.replay import GoldReplayAgent, play


@pytest.fixture
def task_files(tmp_path: Path) -> tuple[Path, Path]:
    """Retail tasks 0-2 of the installed tau2, task 1 revised as tau2-bench revised task 59: its gold actions
    also `calculate` (a read tool), which the installed tau2's task lacks; a split file of train 0, 1 / test 2."""
    from tau_bench_env.runtime import prepare

    prepare()
    retail = shared_domain("retail")
    tasks = [retail.task(task_id).model_dump(mode="json") for task_id in ("0", "1", "2")]
    actions = tasks[1]["evaluation_criteria"]["actions"]
    actions.insert(0, {"action_id": "1_calc", "requestor": "assistant", "name": "calculate",
                       "arguments": {"expression": "2 + 2"}, "info": None})
    tasks_file, split_file = tmp_path / "tasks.json", tmp_path / "split_tasks.json"
    tasks_file.write_text(json.dumps(tasks))
    split_file.write_text(json.dumps({"train": ["0", "1"], "test": ["2"]}))
    return tasks_file, split_file


def retail_files(tasks_file: Path, split_file: Path | None) -> dict:
    return {"type": "retail", "tasks_file": str(tasks_file), **({"split_file": str(split_file)} if split_file else {})}


def test_tasks_come_from_the_files_and_tau2_scores_the_revised_task(task_files):
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    tasks_file, split_file = task_files
    domain = shared_domain("retail", json.dumps({"split_file": str(split_file), "tasks_file": str(tasks_file)}, sort_keys=True))
    assert [t.id for t in domain.tasks("train")] == ["0", "1"] and [t.id for t in domain.tasks("test")] == ["2"]
    assert [t.id for t in domain.tasks("base")] == ["0", "1", "2"]  # base: every task of the file
    revised = domain.task("1")
    assert revised.evaluation_criteria.actions[0].name == "calculate"
    assert shared_domain("retail").task("1").evaluation_criteria.actions[0].name != "calculate"  # tau2's own
    episode = Episode(domain, revised, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=40))
    result = asyncio.run(play(episode, GoldReplayAgent(revised)))
    tau2 = evaluate_simulation(simulation=episode.simulation_run(), task=revised, evaluation_type=EvaluationType.ALL,
                               solo_mode=False, domain="retail").reward
    assert result.reward == tau2 == 1.0
    with pytest.raises(ValueError, match="no split 'valid'"):
        domain.tasks("valid")


def test_specs_name_task_files_and_the_rows_of_both_backends_carry_them(task_files, minimal, tmp_path: Path):
    import pyarrow.parquet as pq

    from ctu.backends.skyrl.config import prepare_data
    from ctu.composition import build_components
    from ctu.rollout.build import env_setup
    from ctu.runners.task_rows import train_rows
    from tau_bench_env.env import TauBenchEnv

    tasks_file, split_file = task_files
    minimal["data"] = {"train": [{"domain": retail_files(tasks_file, split_file), "split": "train"}],
                       "test_sets": {"revised": {"domain": retail_files(tasks_file, split_file), "split": "test"}}}
    minimal["trainer"] = {"train_batch_size": 2, "policy_mini_batch_size": 2}
    spec = spec_from_dict(minimal).spec
    assert schedule(spec).train_tasks == 2
    components = build_components(spec)
    assert len(components.domains) == 1  # the train and test sources name one domain: built once
    assert [row.extras["task_id"] for row in train_rows(components)] == ["0", "1"]  # the Tinker backend's rows
    prepare_data(components, tmp_path)  # SkyRL's, the same rows in parquet
    [_, row] = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert row["domain_params"] == json.dumps(train_rows(components)[1].extras["domain_params"], sort_keys=True)
    env = TauBenchEnv(env_setup(components), row)
    assert env.episode.task.evaluation_criteria.actions[0].name == "calculate"  # the file's task reached the env


def test_bad_task_files_are_spec_errors_at_their_path(task_files, minimal, tmp_path: Path):
    tasks_file, split_file = task_files
    cases = {
        "data.train.0.domain.tasks_file": ({"domain": retail_files(tmp_path / "missing.json", None), "split": "base"}, "cannot read"),
        "data.train.0.split": ({"domain": retail_files(tasks_file, split_file), "split": "valid"}, "has no split 'valid'"),
        "data.train.0.domain.split_file": ({"domain": {"type": "retail", "split_file": str(split_file)}, "split": "train"},
                                           "needs its tasks_file"),
    }
    for path, (source, message) in cases.items():
        minimal["data"] = {"train": [source]}
        with pytest.raises(SpecError) as info:
            spec_from_dict(minimal)
        assert any(issue.path == path and message in issue.message for issue in info.value.issues), (path, info.value.issues)
    not_tasks = tmp_path / "not_tasks.json"
    not_tasks.write_text('{"0": {}}')
    minimal["data"] = {"train": [{"domain": retail_files(not_tasks, None), "split": "base"}]}
    with pytest.raises(SpecError, match="not a JSON list of tau2 tasks"):
        spec_from_dict(minimal)


def test_task_files_of_tau2s_format_but_broken_are_spec_errors_without_a_replay(task_files, minimal, tmp_path: Path):
    """Format faults `ctu validate` finds without playing a task: no task, an id twice, a split naming a task the
    file lacks, a task tau2's `Task` model rejects (a case each)."""
    tasks_file, _ = task_files
    tasks = json.loads(tasks_file.read_text())
    broken = {"empty.json": ([], None, "holds no task"),
              "twice.json": ([*tasks, tasks[0]], None, "more than once: 0"),
              "unknown.json": (tasks, {"train": ["0", "7"], "test": ["2"]}, "lacks: 7"),
              "rejected.json": ([*tasks[:2], {**tasks[2], "user_scenario": "call about an order"}], None,
                                "tau2's Task model rejects task 2: user_scenario")}
    for name, (content, splits, message) in broken.items():
        path = tmp_path / name
        path.write_text(json.dumps(content))
        split = None
        if splits is not None:
            split = tmp_path / f"split_{name}"
            split.write_text(json.dumps(splits))
        minimal["data"] = {"train": [{"domain": retail_files(path, split), "split": "train" if split else "base"}]}
        with pytest.raises(SpecError) as info:
            spec_from_dict(minimal)
        assert any(message in issue.message for issue in info.value.issues), (name, info.value.issues)
