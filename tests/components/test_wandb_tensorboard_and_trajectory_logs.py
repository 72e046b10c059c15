"""The `wandb` and `tensorboard` trackers, several trackers at once, and trajectory logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.components.trackers.combined import Trackers
from ctu.components.trackers.wandb import WandbTracker
from ctu.registry import registry
from ctu.rollout.records import TrajectoryRecord
from ctu.rollout.trajectories import TrajectoryLogger
from tau_bench_env.outcome import EpisodeResult


def build(name: str, **params):
    info = registry.trackers.get(name)
    return info.build(info.params_model(**params))


def test_wandb_is_offline_without_a_key_logs_one_step_counter_and_finishes_explicitly(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = build("wandb")
    config = {"rewards": [{"type": "tau_outcome"}, {"type": "taxonomy_feedback", "weight": 0.1}]}
    tracker.start(tmp_path, "run", "ctu-tau-bench_with_taxonomy_feedback", config, tags=["smoke", "seed-7"])
    assert tracker.mode == "offline" and tuple(tracker.run.tags) == ("smoke", "seed-7")  # experiment.tags
    assert tracker.project == "ctu-tau-bench_with_taxonomy_feedback"
    tracker.log({"generation/avg_reward": 0.5}, step=1)
    tracker.log({"test-retail/average_reward": 0.25}, step=1)
    tracker.log({"generation/avg_reward": 0.75}, step=2)
    summary = dict(tracker.run.summary)  # step 1 is committed once step 2 starts: both metrics, one counter
    assert summary["_step"] == 1 and summary["generation/avg_reward"] == 0.5 and summary["test-retail/average_reward"] == 0.25
    with pytest.raises(ValueError, match="must not go back"):
        tracker.log({"generation/avg_reward": 0.1}, step=1)
    tracker.finish()
    assert tracker.run is None
    assert list(tmp_path.glob("wandb/offline-run-*/*.wandb"))
    assert "__del__" not in vars(WandbTracker)


def test_wandb_project_set_on_the_tracker_is_used_as_given(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    tracker = build("wandb", mode="disabled", project="mine")
    tracker.start(tmp_path, "run", "ignored_with_taxonomy_feedback", {"rewards": [{"type": "taxonomy_feedback"}]})
    assert tracker.project == "mine"
    tracker.finish()


def test_tensorboard_writes_scalars_at_the_global_step(tmp_path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = build("tensorboard")
    tracker.start(tmp_path, "run", "p", {})
    tracker.log({"generation/avg_reward": 0.5}, step=3)
    tracker.log({"generation/avg_reward": 1.0}, step=4)
    tracker.finish()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("generation/avg_reward")] == [(3, 0.5), (4, 1.0)]


def test_a_tracker_written_before_tags_were_passed_keeps_working_with_a_warning(tmp_path: Path, caplog):
    """`tags` (`experiment.tags`) joined `Tracker.start` after users wrote trackers: theirs registers, naming what
    to add, and `Trackers.start` reaches it without the argument."""
    started = []

    @registry.trackers.register("older_tracker_test")
    class Older:
        def __init__(self, params):
            self.params = params

        def start(self, run_dir, run_name, project, config, resume_step=None):
            started.append(run_name)

        def log(self, metrics, step):
            pass

        def finish(self):
            pass

    try:
        assert "start takes no `tags`" in caplog.text
        trackers = Trackers([build("older_tracker_test")])
        trackers.start(tmp_path, "run", "p", {}, tags=["smoke"])
        assert started == ["run"]
    finally:
        registry.trackers.unregister("older_tracker_test")


def test_several_trackers_at_once(tmp_path: Path):
    trackers = Trackers([build("jsonl"), build("jsonl", filename="copy.jsonl")])
    trackers.start(tmp_path, "run", "p", {})
    trackers.log({"a/b": 1.0}, step=7)
    trackers.finish()
    for name in ("metrics.jsonl", "copy.jsonl"):
        assert json.loads((tmp_path / name).read_text()) == {"step": 7, "a/b": 1.0}


def record(task_id: str, reward: float) -> TrajectoryRecord:
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_order_details", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "{}"}]
    result = EpisodeResult("retail", task_id, turns=1, termination="user_stop", reward=reward, conversation=conversation)
    return TrajectoryRecord([1], [2], [1], [0.0], reward, "stop", result)


def test_trajectory_logs_every_evaluation_and_a_sample_of_training(tmp_path: Path):
    logger = TrajectoryLogger(tmp_path, every_n_steps=2, train_samples=2, seed=0)
    records = [record(str(i), float(i % 2)) for i in range(5)]
    assert logger(records, "eval", 0).name == "eval_step000000.jsonl"
    assert logger(records, "train", 1) is None
    path = logger(records, "train", 2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "get_order_details"
    assert lines[0]["messages"][2]["role"] == "tool"
    assert logger(records, "train", 2) is None  # another batch of the step (async groups): the sample is full
    before = path.read_text()
    again = TrajectoryLogger(tmp_path, every_n_steps=2, train_samples=2, seed=0)(records, "train", 2)
    assert len(again.read_text().splitlines()) == 2  # a resumed run rewrites the step: no duplicate lines
    [aside] = (tmp_path / "superseded").glob("*/trajectories/train_step000002.jsonl")
    assert aside.read_text() == before  # and the lines it replayed are set aside, not deleted
    logger(records[:2], "eval", 4)
    logger(records[2:], "eval", 4)  # evaluation's next batch joins the first
    for step in (0, 4):
        evaluation = [json.loads(line) for line in (tmp_path / "trajectories" / f"eval_step{step:06d}.jsonl").read_text().splitlines()]
        assert [line["task_id"] for line in evaluation] == ["0", "1", "2", "3", "4"]
    sampled = TrajectoryLogger(tmp_path, every_n_steps=1, train_samples=3, seed=0)
    sampled(records[:2], "train", 6)
    sampled(records[2:], "train", 6)  # a step's second batch fills the sample
    assert len((tmp_path / "trajectories" / "train_step000006.jsonl").read_text().splitlines()) == 3


def test_the_best_validation_step_is_kept_ties_to_the_earlier_and_across_a_resume(tmp_path):
    from ctu.components.trackers.combined import BEST_VALIDATION

    trackers = Trackers([])
    trackers.start(tmp_path, "run", "project", {})
    trackers.log({"test-retail/success_rate": 1.0}, 0)  # a test set never chooses
    assert not (tmp_path / BEST_VALIDATION).exists()
    for step, rate in ((0, 0.25), (3, 0.5), (6, 0.5), (9, 0.0)):
        trackers.log({"validation/success_rate": rate, "validation/average_reward": rate + 0.1}, step)
    assert json.loads((tmp_path / BEST_VALIDATION).read_text()) == {"step": 3, "success_rate": 0.5, "average_reward": 0.6}
    resumed = Trackers([])
    resumed.start(tmp_path, "run", "project", {}, resume_step=9)
    resumed.log({"validation/success_rate": 0.5}, 12)
    assert json.loads((tmp_path / BEST_VALIDATION).read_text())["step"] == 3
