"""Step-wise trajectories with a thinking policy on the tinker backend, end to end on CPU: `ctu run specs/smoke.yaml`
on the built-in thinking model (`builtin:tiny-qwen3-thinking`, the `qwen3_thinking` template), each policy turn its
own training sample, with a context too small for any retail episode's first prompt. SkyRL's trainer runs
step-wise trajectories in tests/runners/test_skyrl_cpu.py's two-step run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_smoke_run import ctu_run, metrics, trajectories

THINKING_STEP_WISE = [
    "model.path=builtin:tiny-qwen3-thinking", "model.chat_template=qwen3_thinking", "rollout.trajectory=step_wise",
    "rollout.max_tokens_per_turn=64", "rollout.n_samples_per_prompt=4",
    # a retail prompt (its policy and 15 tools, ~4.9k tokens here) does not fit; a mock one (~0.8k) does, with room
    # for its three turns
    "model.max_model_len=3000", "environment.overflow={reward: -1.0}",
    "data.train=[{domain: mock, split: base, max_tasks: 4}, {domain: retail, split: train, max_tasks: 2}]",
    "trainer.train_batch_size=6", "trainer.policy_mini_batch_size=6",  # every task a step: four mock groups for a spread
    "data.test_sets={}", "trainer.eval_before_train=false", "tracking.trajectories={every_n_steps: 1, train_samples: 64}",
]


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    result = ctu_run("specs/smoke.yaml", f"experiment.output_dir={out}", *THINKING_STEP_WISE)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out / "smoke"


def test_each_turn_trains_on_what_was_sampled_and_its_reasoning_reaches_no_later_prompt(thinking_run: Path):
    lines = metrics(thinking_run)
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        # each policy turn of the mock episodes is a sample of its own: more samples than episodes trained
        assert line["generation/turn_samples"] > line["train/trained_trajectories"] > 0
        assert line["train/trained_samples"] > line["train/trained_trajectories"]
        # the trainer's log-probability of every sampled token, in the sample's prompt, is the sampler's: each
        # sample's ids are those the turn was sampled from and sampled (the same JAX engine: no precision gap)
        assert line["train/logprob_gap_tokens"] > 0 and line["train/logprob_gap_max"] < 1e-3
    episodes = [episode for step in (1, 2) for episode in trajectories(thinking_run, f"train_step{step:06d}.jsonl")]
    mock = [e for e in episodes if e["domain"] == "mock"]
    assert mock and all(len(e["turn_samples"]) == e["policy_turns"] == len(e["reasoning"]) > 0 for e in mock)
    assert sum(bool(text) for e in mock for text in e["reasoning"]) > 0  # the model thought, in some turns at least
    for episode in mock:  # never sent on: no message of the conversation the later prompts render holds any
        assert not any("</think>" in str(m.get("content")) for m in episode["messages"])
        prompts = [prompt for prompt, _ in episode["turn_samples"]]
        assert prompts == sorted(prompts)  # each turn's prompt is the conversation so far


def test_an_episode_past_the_context_ends_as_context_overflow_and_takes_the_specs_reward(thinking_run: Path):
    episodes = [episode for step in (1, 2) for episode in trajectories(thinking_run, f"train_step{step:06d}.jsonl")]
    retail = [e for e in episodes if e["domain"] == "retail"]
    assert retail and all(e["termination"] == "context_overflow" and e["reward"] == -1.0 for e in retail)
    assert all(e["raw_reward"] == 0.0 and e["turn_samples"] == [] for e in retail)  # tau2's 0; nothing sampled to train
    assert all(e["termination"] != "context_overflow" for e in episodes if e["domain"] == "mock")
    for line in metrics(thinking_run):
        assert 0 < line["environment/termination/context_overflow"] < 1
    assert json.loads((thinking_run / "state.json").read_text())["step"] == 2


def test_ctu_view_shows_each_turns_reasoning_on_its_message(thinking_run: Path):
    from ctu.view.data import episode_row

    line = next(e for step in (1, 2) for e in trajectories(thinking_run, f"train_step{step:06d}.jsonl")
                if e["domain"] == "mock" and any(e["reasoning"]))
    row = episode_row(0, "run", line, [], {})
    policy = [m for m in row["messages"] if m["role"] == "assistant"][-line["policy_turns"]:]
    assert [m.get("reasoning", "") for m in policy] == line["reasoning"]  # each on its own turn; none on the greeting
    assert "reasoning" not in next(m for m in row["messages"] if m["role"] == "assistant")
