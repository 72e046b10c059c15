"""ctu's pieces inside SkyRL's trainer, called the way SkyRL calls them (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.components.trackers.combined import Trackers


def test_skyrl_sample_logging_passes_over_ctus_tracker(tmp_path: Path):
    from skyrl.train.utils.trajectory_logging import TrajectoryLogger

    from ctu.backends.skyrl.experiment import CtuTracking
    from ctu.spec.models import Tracking

    trackers = Trackers.with_metrics_file([config.build() for config in Tracking(trackers=["jsonl"]).trackers])
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
    from ctu.rollout.records import TrajectoryRecord
    from tau_bench_env.outcome import EpisodeResult

    result = EpisodeResult("retail", task, turns=2, termination=termination, reward=reward)
    return TrajectoryRecord([1], [2, 3], [1, 1], [-0.1, -0.2], reward, "stop", result,
                            extras={"test_set": test_set, "task_id": task}, policy_turns=1)


def test_eval_all_metrics_are_computed_over_every_eval_trajectory(monkeypatch):
    """SkyRL combines per-batch generator metrics by their names; ctu's trainer recomputes them from records."""
    import asyncio
    from types import SimpleNamespace

    from skyrl.train.trainer import RayPPOTrainer

    from ctu.backends.skyrl.trainer import CtuPPOTrainer

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


def training_batch(rewards: list[float], uids: list[str], pad: int = 0, errors: list[str | None] | None = None):
    """The batch ctu's trainer hands `compute_advantages_and_returns`: token rewards on each response's last
    token, masks, uids, each trajectory's infrastructure-error flag (from `errors`), and `pad` rows padded on as SkyRL
    pads for data parallelism."""
    import torch
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch, pad_training_input_batch

    from ctu.backends.skyrl.trainer import EXCLUDED_KEY

    rows, length = len(rewards), 3
    token_rewards = torch.zeros(rows, length)
    token_rewards[:, -1] = torch.tensor(rewards)
    batch = TrainingInputBatch({
        "sequences": torch.ones(rows, length + 2, dtype=torch.long),
        "response_mask": torch.ones(rows, length, dtype=torch.long),
        "loss_mask": torch.ones(rows, length, dtype=torch.long),
        "rewards": token_rewards,
        "values": None,
    })
    batch.metadata = {"uids": list(uids), "avg_response_length": float(length),
                      EXCLUDED_KEY: [error is not None for error in errors or [None] * rows]}
    return pad_training_input_batch(batch, pad)


def skyrl_trainer(infra_errors: list[str | None], max_rate: float = 0.5):

    from skyrl.train.config import SkyRLTrainConfig

    from ctu.backends.skyrl.trainer import CtuPPOTrainer

    trainer = object.__new__(CtuPPOTrainer)
    trainer.cfg = SkyRLTrainConfig()
    trainer.all_metrics = {}
    trainer.max_infra_error_rate = max_rate
    trainer.global_step = 1
    trainer._infra_errors = infra_errors  # what `postprocess_generator_output` read from the batch
    return trainer


def test_skyrls_advantages_leave_infrastructure_errors_out_of_groups_and_loss():
    """SkyRL's own GRPO estimator runs; the failed episode joins no group and trains nothing, a group left with one
    episode has no baseline, and the padding SkyRL adds stays as SkyRL made it."""
    from ctu.runners.grpo import group_advantages

    rewards = [1.0, 0.0, 0.3, 0.9, 0.2, 0.0]
    uids = ["a", "a", "a", "b", "b", "b"]
    errors = [None, None, "user simulator: 503", None, "evaluator: KeyError", "user simulator: 503"]
    trainer = skyrl_trainer(errors)
    data = trainer.compute_advantages_and_returns(training_batch(rewards, uids, pad=2, errors=errors))
    advantages = data["advantages"][:, -1].tolist()
    expected = group_advantages(rewards, 3, excluded=[e is not None for e in errors])
    assert advantages[:6] == pytest.approx(expected, abs=1e-5)
    assert advantages[0] > 0.5 and advantages[2] == 0.0 and advantages[3:6] == [0.0, 0.0, 0.0]
    assert data["loss_mask"].sum(dim=1).tolist() == [3, 3, 0, 3, 0, 0, 0, 0]
    assert data.metadata["uids"] == uids + ["pad0", "pad1"]
    # over the tokens still trained on: rows 0 and 1 (+-0.71) and row 3 (0, no baseline)
    assert trainer.all_metrics["loss/avg_raw_advantages_abs"] == pytest.approx(2 * abs(advantages[0]) / 3, abs=1e-5)
    assert not trainer._skip_step  # 3 of 6 is not more than half


def test_a_step_with_too_many_infrastructure_errors_trains_nothing():
    errors = ["user simulator: 503"] * 3 + [None]
    trainer = skyrl_trainer(errors, max_rate=0.5)
    data = trainer.compute_advantages_and_returns(training_batch([0.0, 0.0, 0.0, 1.0], ["a", "a", "b", "b"], errors=errors))
    assert trainer._skip_step
    # SkyRL's own training step is never reached (it would need workers this trainer does not have)
    assert trainer.train_critic_and_policy(data) == {}
    assert trainer.all_metrics["train/skipped_steps"] == 1.0


def test_skyrls_advantages_are_unchanged_without_infrastructure_errors():
    rewards = [1.0, 0.0, 0.3, 0.9]
    plain = skyrl_trainer([None] * 4)
    data = plain.compute_advantages_and_returns(training_batch(rewards, ["a", "a", "b", "b"]))
    from skyrl.train.trainer import RayPPOTrainer

    reference = skyrl_trainer([None] * 4)
    expected = RayPPOTrainer.compute_advantages_and_returns(reference, training_batch(rewards, ["a", "a", "b", "b"]))
    assert data["advantages"].tolist() == expected["advantages"].tolist()
    assert data["loss_mask"].tolist() == expected["loss_mask"].tolist() and not plain._skip_step


def test_skyrls_negative_advantages_are_weighed_by_the_spec_with_and_without_infrastructure_errors():
    from ctu.runners.grpo import group_advantages

    rewards, uids = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], ["a", "a", "a", "b", "b", "b"]
    for errors in ([None] * 6, [None, None, None, None, None, "user simulator: 503"]):
        trainer = skyrl_trainer(errors)
        trainer.negative_advantage_weight = 0.0
        advantages = trainer.compute_advantages_and_returns(training_batch(rewards, uids, errors=errors))["advantages"]
        expected = group_advantages(rewards, 3, excluded=[e is not None for e in errors])
        assert advantages[:, -1].tolist() == pytest.approx([max(a, 0.0) for a in expected], abs=1e-5)
        assert advantages[0, -1] > 1.0 and advantages[1, -1] == 0.0


def test_small_datasets_are_filtered_in_process_and_one_short_of_a_batch_is_refused(tmp_path: Path):
    """SkyRL's `PromptDataset` would spawn 8 processes to filter a task list of a few rows (5-12 s a launch)."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from ctu.backends.skyrl.experiment import IN_PROCESS_FILTER_ROWS, CtuPPOExp, filter_workers
    from ctu.models.tiny_qwen3 import tokenizer_path

    def parquet(name: str, rows: int) -> str:
        prompts = [[{"role": "user", "content": f"task {i}"}] for i in range(rows)]
        pq.write_table(pa.table({"prompt": prompts, "env_class": ["tau_bench"] * rows}), tmp_path / name)
        return str(tmp_path / name)

    small, large = parquet("train.parquet", 3), parquet("large.parquet", IN_PROCESS_FILTER_ROWS - 2)
    assert filter_workers([small]) == 1 and filter_workers([large]) == 1
    assert filter_workers([small, large]) == 8  # past the bound in all: SkyRL's own
    cfg = SimpleNamespace(data=SimpleNamespace(train_data=[small], val_data=[small]),
                          trainer=SimpleNamespace(max_prompt_length=64, train_batch_size=3, eval_interval=1))
    experiment = SimpleNamespace(cfg=cfg, tokenizer=AutoTokenizer.from_pretrained(str(tokenizer_path())))
    experiment._prompt_dataset = lambda paths: CtuPPOExp._prompt_dataset(experiment, paths)
    assert len(CtuPPOExp.get_train_dataset(experiment)) == 3
    assert len(CtuPPOExp.get_eval_dataset(experiment)) == 3
    cfg.trainer.eval_interval = 0
    assert CtuPPOExp.get_eval_dataset(experiment) is None
    cfg.trainer.train_batch_size = 4
    with pytest.raises(ValueError, match="3 prompts, fewer than one batch"):
        CtuPPOExp.get_train_dataset(experiment)


def test_a_session_left_on_an_ended_event_loop_is_released_not_reported_unclosed(caplog):
    """SkyRL's client keeps an aiohttp session per event loop; its colocated start-up sleeps the engines through
    `asyncio.run`, leaving a session with a kept-alive connection on a loop that has ended (SkyRL 0.4.0 later drops
    it unclosed: aiohttp's "Unclosed client session" at the first weight sync)."""
    import asyncio
    import gc

    import aiohttp
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

    from ctu.backends.skyrl.generate_client import release_ended_loop_sessions
    from tests.support.openai_server import ScriptedOpenAIServer

    async def request(client, url):
        session = await client._get_session()  # SkyRL's own, per loop
        async with session.get(url) as response:
            await response.read()

    with ScriptedOpenAIServer() as server:
        for release in (False, True):
            client = RemoteInferenceClient(proxy_url=server.base_url, server_urls=[server.base_url], data_parallel_size=1)
            asyncio.run(request(client, server.base_url + "/models"))
            sessions = client._get_generate_client()._sessions
            [session] = sessions.values()
            assert isinstance(session, aiohttp.ClientSession) and not session.closed
            caplog.clear()
            if release:
                assert release_ended_loop_sessions(client) == 1 and sessions == {}
            else:
                sessions.clear()  # as SkyRL drops it
            del session, client, sessions
            gc.collect()
            unclosed = [r for r in caplog.records if "Unclosed" in r.getMessage()]
            assert bool(unclosed) is not release, unclosed
