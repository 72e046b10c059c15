"""One GRPO step of the Tinker runner (`TinkerRunner._train_step`) against a recording stand-in for the Tinker
training client, with a generator stand-in whose batch holds infrastructure errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from ctu.runners.rundir import RunDir
from ctu.runners.task_rows import TaskRow
from ctu.runners.tinker.runner import TinkerRunner
from ctu.spec import spec_from_dict


class Done:
    def __init__(self, metrics: dict[str, float]) -> None:
        self.metrics = metrics

    async def result_async(self) -> Done:
        return self


class RecordingTraining:
    """Records what a step sends to Tinker's `forward_backward` and whether it steps the optimizer."""

    def __init__(self) -> None:
        self.advantages: list[list[float]] = []
        self.optimizer_steps = 0

    async def forward_backward_async(self, data, loss, config):
        self.advantages += [list(datum.loss_fn_inputs["advantages"].to_numpy()) for datum in data]
        return Done({"loss:sum": 0.5})

    async def optim_step_async(self, params):
        self.optimizer_steps += 1
        return Done({})


class FixedGenerator:
    """A batch of two groups of two with the given rewards and infrastructure errors."""

    def __init__(self, rewards: list[float], infra_errors: list[str | None]) -> None:
        self.rewards = rewards
        self.last_records = [SimpleNamespace(infra_error=e) for e in infra_errors]

    async def generate(self, input_batch):
        n = len(self.rewards)
        return {"prompt_token_ids": [[1, 2]] * n, "response_ids": [[3, 4]] * n, "loss_masks": [[1, 1]] * n,
                "rewards": self.rewards, "rollout_logprobs": None, "rollout_metrics": {}}


def step(minimal, tmp_path: Path, rewards, infra_errors, **trainer):
    minimal["rollout"] = {"n_samples_per_prompt": 2}
    minimal["trainer"] = {"train_batch_size": 2, "policy_mini_batch_size": 2, **trainer}
    spec = spec_from_dict(minimal).spec
    runner = TinkerRunner(spec, RunDir(tmp_path), progress=False)
    training = RecordingTraining()
    rows = [TaskRow({"domain": "retail", "task_id": "1"}), TaskRow({"domain": "retail", "task_id": "2"})]
    metrics = asyncio.run(runner._train_step(FixedGenerator(rewards, infra_errors), training, rows, 1))
    return training, metrics


def test_an_infrastructure_error_trains_nothing_and_leaves_its_group_without_a_baseline(minimal, tmp_path):
    training, metrics = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"])
    # group 1 trains both episodes; group 2 has one episode left, so nothing to compare it with
    assert [a[-1] for a in training.advantages] == pytest.approx([0.7071, -0.7071], abs=1e-3)
    assert training.optimizer_steps == 1
    assert metrics["train/trained_trajectories"] == 2.0 and metrics["train/skipped_steps"] == 0.0


def test_a_step_over_the_infra_error_rate_is_skipped(minimal, tmp_path, caplog):
    errors = ["user simulator: 503", "user simulator: 503", None, "evaluator: KeyError"]
    training, metrics = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], errors, max_infra_error_rate=0.5)
    assert training.advantages == [] and training.optimizer_steps == 0
    assert metrics["train/skipped_steps"] == 1.0 and metrics["train/optimizer_steps"] == 0.0
    assert "step 1 skipped: 3 of 4 episodes ended by an infrastructure error" in caplog.text
    training, metrics = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], errors, max_infra_error_rate=0.75)
    assert training.optimizer_steps == 0 and metrics["train/skipped_steps"] == 0.0  # not skipped; nothing left to compare
