"""`ctu data sft`: gold replays of generated mock tasks played with the spec's user simulator, written as the
spec's parser writes turns (or as native tool calls), and a teacher's episodes kept by tau2's reward; a held-out
task is an error, never a row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from .conftest import REPO
from .support.cli import ctu_here as ctu


@pytest.fixture(scope="module")
def task_set(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tasks")
    spec = folder / "generate.yaml"
    spec.write_text(yaml.safe_dump({"extends": str(REPO / "specs" / "smoke.yaml"), "task_generation": {
        "domain": "mock", "generator": {"type": "template", "templates": "mock"}, "count": 10, "seed": 4}}))
    assert ctu("tasks", "generate", str(spec), "--out", str(folder / "out"), "--no-progress").returncode == 0
    return folder / "out"


def sft_spec(tmp_path: Path, task_set: Path, test_split: str = "validation", **rollout) -> Path:
    source = {"type": "mock", "tasks_file": str(task_set / "tasks.json"), "split_file": str(task_set / "split_tasks.json")}
    spec = tmp_path / "sft.yaml"
    spec.write_text(yaml.safe_dump({
        "extends": str(REPO / "specs" / "smoke.yaml"), "experiment": {"name": "sft"},
        "data": {"train": [{"domain": source, "split": "train"}], "test_sets": {"held_out": {"domain": source, "split": test_split}}},
        "environment": {"max_turns": 6}, **({"rollout": rollout} if rollout else {})}))
    return spec


def rows(folder: Path) -> list[dict]:
    return pq.read_table(folder / "train.parquet").to_pylist()


def test_gold_replays_are_written_as_the_specs_parser_writes_turns(task_set: Path, tmp_path: Path):
    from ctu.components.parsers.hermes import HermesParser
    from ctu.spec import load_spec

    result = ctu("data", "sft", str(sft_spec(tmp_path, task_set)), "--out", str(tmp_path / "sft"))
    assert result.returncode == 0, result.stdout + result.stderr
    train = json.loads((task_set / "split_tasks.json").read_text())["train"]
    assert f"{len(train)} conversation(s) of {len(train)} task(s) kept" in result.stdout
    written = rows(tmp_path / "sft")
    assert [row["task_id"] for row in written] == train and {row["source"] for row in written} == {"gold"}
    tasks = {task["id"]: task for task in json.loads((task_set / "tasks.json").read_text())}
    for row in written:
        assert row["reward"] == 1.0 and row["tools"] is None and row["messages"][0]["role"] == "system"
        calls = [call for m in row["messages"] if m["role"] == "assistant"
                 for call in HermesParser().parse(m["content"]).tool_calls]
        gold = tasks[row["task_id"]]["evaluation_criteria"]["actions"]
        assert [(c.name, c.arguments) for c in calls] == [(a["name"], a["arguments"]) for a in gold]
    report = json.loads((tmp_path / "sft" / "sft_report.json").read_text())
    assert report["rows"] == len(train) and report["by_source"] == {"gold": len(train)} and report["tokens"] > 1000
    spec = load_spec(tmp_path / "sft.yaml").spec
    assert spec.model.path == "builtin:tiny-qwen3"
    from datasets import load_dataset  # what SkyRL's SFT trainer reads a local dataset with

    assert len(load_dataset(str(tmp_path / "sft"), split="train")) == len(train)


def test_with_native_tool_calling_turns_are_structured_calls_with_the_tools(task_set: Path, tmp_path: Path):
    spec = sft_spec(tmp_path, task_set, native_tool_calling=True)
    result = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft"), "--no-tokens")
    assert result.returncode == 0, result.stdout + result.stderr
    row = rows(tmp_path / "sft")[0]
    assert {tool["function"]["name"] for tool in json.loads(row["tools"])} >= {"create_task", "get_users"}
    calls = [m for m in row["messages"] if m["role"] == "assistant" and m["tool_calls"]]
    assert calls and all(not (m["content"] or "").startswith("<tool_call>") for m in calls)


def test_a_held_out_task_is_an_error_never_a_row(task_set: Path, tmp_path: Path):
    spec = sft_spec(tmp_path, task_set, test_split="base")  # the test set holds every task, the training ones too
    result = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft"), "--no-tokens")
    assert result.returncode == 2 and "data.train.0.split: " in result.stderr and "held-out task(s) would train" in result.stderr
    assert "mock/mock_template_" in result.stderr and not (tmp_path / "sft" / "train.parquet").exists()


def episode_line(task: str, reward: float, text: str, infra: str | None = None, domain: str = "mock") -> str:
    messages = [{"role": "system", "content": "s"}, {"role": "assistant", "content": text}]
    return json.dumps({"domain": domain, "task_id": task, "raw_reward": reward, "infra_error": infra, "messages": messages})


def test_held_out_means_its_domains_held_out_splits_whatever_the_spec_names_and_whichever_rows_are_kept(
        task_set: Path, tmp_path: Path):
    """No test set in the spec: the task set's own held-out split (`validation`) and tau2's retail `test` split are
    still held out, an episode of them refused even when its reward would have rejected it; `validate` reads
    `data.sft`'s rows against the same tasks."""
    splits = json.loads((task_set / "split_tasks.json").read_text())
    spec = tmp_path / "no_test_set.yaml"
    source = {"type": "mock", "tasks_file": str(task_set / "tasks.json"), "split_file": str(task_set / "split_tasks.json")}
    spec.write_text(yaml.safe_dump({"extends": str(REPO / "specs" / "smoke.yaml"), "experiment": {"name": "sft"}})
                    + f"data:\n  train: [{json.dumps({'domain': source, 'split': 'train'})}]\n"
                    + "  test_sets:\n    retail: !delete\n")  # smoke.yaml's only test set
    episodes = tmp_path / "episodes"
    episodes.mkdir()
    from tau_bench_env.gold_limits import gold_limits

    retail_test = gold_limits()["retail"]["splits"]["test"][0]
    for lines, expected in (([episode_line(splits["validation"][0], 0.0, "failed, so never kept")],
                             f"mock/{splits['validation'][0]} (mock's held-out split 'validation')"),
                            ([episode_line(retail_test, 1.0, "a success", domain="retail")],
                             f"retail/{retail_test} (retail's held-out split 'test')")):
        (episodes / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
        refused = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft"), "--from-eval", str(episodes), "--no-tokens")
        assert refused.returncode == 2 and expected in " ".join(refused.stderr.split()), refused.stderr
        assert not (tmp_path / "sft").exists()
    # SFT data written elsewhere (a test task in it): validate refuses the spec that trains on it
    import pyarrow as pa

    from ctu.sft.data import parquet_schema

    leaked = tmp_path / "leaked"
    leaked.mkdir()
    row = {"messages": [{"role": "user", "content": "hi", "tool_call_id": None, "tool_calls": None}], "tools": None,
           "domain": "mock", "task_id": splits["validation"][0], "source": "gold", "reward": 1.0}
    pq.write_table(pa.Table.from_pylist([row], schema=parquet_schema()), leaked / "train.parquet")
    checked = ctu("validate", str(spec), f"data.sft={leaked}")
    assert checked.returncode == 2, checked.stderr
    assert f"data.sft: 1 held-out task(s) in the SFT data: mock/{splits['validation'][0]}" in " ".join(checked.stderr.split())


def test_sft_data_that_keeps_nothing_exits_3_and_writes_nothing(task_set: Path, tmp_path: Path):
    splits = json.loads((task_set / "split_tasks.json").read_text())
    episodes = tmp_path / "episodes"
    episodes.mkdir()
    (episodes / "trajectories.jsonl").write_text(episode_line(splits["train"][0], 0.0, "a failure") + "\n")
    result = ctu("data", "sft", str(sft_spec(tmp_path, task_set)), "--out", str(tmp_path / "sft"), "--no-gold",
                 "--from-eval", str(episodes), "--no-tokens")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "no conversation kept (below_min_reward 1): nothing written" in " ".join(result.stderr.split())
    assert not (tmp_path / "sft" / "train.parquet").exists()
    calibrated = ctu("data", "sft", str(sft_spec(tmp_path, task_set)), "--out", str(tmp_path / "sft"), "--no-gold",
                     "--from-eval", str(tmp_path), "--no-tokens")  # a `ctu tasks calibrate` folder: its episodes/ read
    assert calibrated.returncode == 3 and "below_min_reward 1" in calibrated.stderr, calibrated.stderr


def test_rejection_sampling_keeps_a_teachers_successes_once_each_and_at_most_n_per_task(task_set: Path, tmp_path: Path):
    train = json.loads((task_set / "split_tasks.json").read_text())["train"]
    held = json.loads((task_set / "split_tasks.json").read_text())["validation"][0]

    line = episode_line
    episodes = tmp_path / "episodes"
    episodes.mkdir()
    lines = [line(train[0], 1.0, "a"), line(train[0], 1.0, "a"), line(train[0], 1.0, "b"), line(train[0], 1.0, "c"),
             line(train[1], 0.0, "d"), line(train[1], 1.0, "e", infra="user simulator down"), line(train[2], 1.0, "f")]
    (episodes / "trajectories.jsonl").write_text("\n".join(lines) + "\n" + '{"cut')
    spec = sft_spec(tmp_path, task_set)
    result = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft"), "--no-gold", "--from-eval", str(episodes),
                 "--max-per-task", "2", "--no-tokens")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(row["task_id"], row["messages"][1]["content"]) for row in rows(tmp_path / "sft")] == [
        (train[0], "a"), (train[0], "b"), (train[2], "f")]
    assert json.loads((tmp_path / "sft" / "sft_report.json").read_text())["rejected"] == {
        "below_min_reward": 1, "cut_line": 1, "duplicate": 1, "infra_error": 1, "over_max_per_task": 1}
    (episodes / "trajectories.jsonl").write_text(line(held, 1.0, "g") + "\n")
    leaked = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft2"), "--no-gold", "--from-eval", str(episodes), "--no-tokens")
    assert leaked.returncode == 2 and f"mock/{held} (test set 'held_out')" in leaked.stderr
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "train.parquet").write_text("mine")  # a file of one's own, not ctu's (no sft_report.json beside it)
    refused = ctu("data", "sft", str(spec), "--out", str(theirs), "--no-gold", "--from-eval", str(episodes), "--no-tokens")
    assert refused.returncode == 2 and "holds files `ctu data sft` does not write" in " ".join(refused.stderr.split())
    assert (theirs / "train.parquet").read_text() == "mine"
    nothing = ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft3"), "--no-gold")
    assert nothing.returncode == 2 and "no source of SFT data" in nothing.stderr


def test_sft_data_is_checked_by_validate_and_planned_on_both_backends(task_set: Path, tmp_path: Path):
    spec = sft_spec(tmp_path, task_set)
    assert ctu("data", "sft", str(spec), "--out", str(tmp_path / "sft"), "--no-tokens").returncode == 0
    good = ctu("validate", str(spec), f"data.sft={tmp_path / 'sft'}")
    assert good.returncode == 0, good.stderr
    explained = ctu("explain", str(spec), f"data.sft={tmp_path / 'sft' / 'train.parquet'}")
    assert "# schedule: 9 SFT conversations at 4 a step: 2 SFT step(s) per epoch" in explained.stdout
    planned = ctu("run", str(spec), f"data.sft={tmp_path / 'sft'}", "--dry-run")
    assert planned.returncode == 0 and f"SFT step(s) of 4 conversations from {tmp_path / 'sft'}" in " ".join(planned.stdout.split())
    missing = ctu("validate", str(spec), f"data.sft={tmp_path / 'nowhere'}")
    assert missing.returncode == 2 and "data.sft: " in missing.stderr and "is not SFT data" in missing.stderr
    skyrl = str(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml")
    split = ctu("validate", skyrl, f"data.sft={tmp_path / 'sft'}", "backend.micro_train_batch_size_per_gpu=3")
    assert split.returncode == 2 and "backend.micro_train_batch_size_per_gpu: must divide an SFT step's conversations" in split.stderr
    on_skyrl = ctu("run", skyrl, f"data.sft={tmp_path / 'sft'}", "--dry-run")
    assert on_skyrl.returncode == 0, on_skyrl.stderr
    assert "# SkyRL SFT config (accepted by SkyRL's validate_sft_cfg)" in on_skyrl.stdout
    assert "pretokenized_dataset_paths:" in on_skyrl.stdout and "SkyRL's SFTTrainer" in on_skyrl.stdout


def test_grpo_from_a_runs_export_needs_the_export_and_an_explicit_reference(tmp_path: Path):
    export = tmp_path / "runs" / "sft" / "exports" / "global_step_2" / "policy"
    skyrl = str(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml")
    missing = ctu("validate", skyrl, f"model.path={export}", "model.family=qwen3")
    assert missing.returncode == 2 and "names a run's export that does not exist" in missing.stderr
    export.mkdir(parents=True)
    (export / "config.json").write_text("{}")
    unnamed = ctu("validate", skyrl, f"model.path={export}", "model.family=qwen3", "algorithm.use_kl_loss=true")
    assert unnamed.returncode == 2 and "model.reference_path: GRPO from a run's export with a KL loss" in " ".join(unnamed.stderr.split())
    named = ctu("validate", skyrl, f"model.path={export}", "model.family=qwen3", "algorithm.use_kl_loss=true",
                "model.reference_path=builtin:tiny-qwen3")
    assert "GRPO from a run's export" not in named.stderr and "does not exist" not in named.stderr, named.stderr
