"""ctu's pieces inside SkyRL's trainer, called the way SkyRL calls them (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

from ctu.components.trackers.builtin import run_trackers


def test_skyrl_sample_logging_passes_over_ctus_tracker(tmp_path: Path):
    from skyrl.train.utils.trajectory_logging import TrajectoryLogger

    from ctu.runners.skyrl_exp import CtuTracking
    from ctu.spec.models import Tracking

    trackers = run_trackers(Tracking(trackers=["jsonl"]).trackers)
    trackers.start(tmp_path, "x", "p", {})
    tracking = CtuTracking(trackers)
    output = {"response_ids": [[1, 2, 3]], "rewards": [1.0], "loss_masks": [[1, 1, 1]]}
    # SkyRL's trainer does this every step when `trainer.num_logger_train_samples` > 0
    TrajectoryLogger().log(tracker=tracking, num_samples=2, prompts=[[{"role": "user", "content": "hi"}]],
                           generator_output=output, tokenizer=None, global_step=1, wandb_key="trajectories/train")
    tracking.log({"reward/avg_final_reward": 0.5, "note": "text"}, step=1)
    tracking.finish()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "reward/avg_final_reward": 0.5}]


def record(reward: float, termination: str, test_set: str, task: str):
    from ctu.rollout.generator import TrajectoryRecord

    return TrajectoryRecord([1], [2, 3], [1, 1], [-0.1, -0.2], reward, "stop", {"reward": reward, "termination": termination, "turns": 2},
                            extras={"test_set": test_set, "task_id": task}, policy_turns=1)


def test_eval_all_metrics_are_computed_over_every_eval_trajectory(monkeypatch):
    """SkyRL combines per-batch generator metrics by their names; ctu's trainer recomputes them from records."""
    import asyncio
    from types import SimpleNamespace

    from skyrl.train.trainer import RayPPOTrainer

    from ctu.runners.skyrl_exp import CtuPPOTrainer

    batches = [[record(1.0, "user_stop", "retail", "1"), record(1.0, "user_stop", "retail", "2")],
               [record(0.0, "max_turns", "airline", "3"), record(1.0, "user_stop", "airline", "4")]]
    pending: list = []

    async def skyrl_eval(self, *args, **kwargs):
        # what SkyRL's evaluate() reports for these two batches: success rates summed, "termination" keys min'd
        for batch in batches:
            pending.extend(batch)
        return {"eval/all/generation/success_rate": 1.5, "eval/all/environment/termination/user_stop": 0.5, "eval/all/avg_score": 0.75}

    monkeypatch.setattr(RayPPOTrainer, "eval", skyrl_eval)
    trainer = object.__new__(CtuPPOTrainer)
    trainer.generator = SimpleNamespace(pop_eval_records=lambda: [pending.pop(0) for _ in range(len(pending))])
    trainer.cfg = SimpleNamespace(generator=SimpleNamespace(eval_n_samples_per_prompt=1))
    metrics = asyncio.run(trainer.eval())
    assert metrics["eval/all/generation/success_rate"] == 0.75
    assert metrics["eval/all/environment/termination/user_stop"] == 0.75
    assert metrics["eval/all/environment/termination/max_turns"] == 0.25
    assert metrics["eval/all/reward/avg_outcome_reward"] == 0.75 and metrics["eval/all/avg_score"] == 0.75
    assert metrics["test-retail/success_rate"] == 1.0 and metrics["test-airline/success_rate"] == 0.5
