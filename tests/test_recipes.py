"""The shipped recipes (`specs/recipes/*/`): every stage's spec is valid once the stages before it have written
what it names, and names what they write. The CPU recipe runs end to end in tests/runners/test_smoke_run.py;
the Qwen3-8B recipe needs GPUs, Tinker's service and a teacher LLM, so here its stages are validated in a folder
holding stand-ins of what the earlier stages write: tasks from `ctu tasks generate` with the built-in retail
template set (in place of the teacher LLM's), SFT data of one conversation, and an export's config.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .conftest import REPO
from .support.cli import run_env

RECIPE = REPO / "specs" / "recipes" / "qwen3_8b_retail"
STAGES = ["tasks", "train", "sft", "grpo"]


def ctu(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=run_env(), timeout=300)


def test_each_stage_of_the_8b_recipe_is_valid_once_the_stages_before_it_ran(tmp_path: Path):
    runs = tmp_path / "runs" / "qwen3_8b_retail"
    before = {stage: ctu(tmp_path, "validate", str(RECIPE / f"{stage}.yaml")) for stage in STAGES}
    assert before["tasks"].returncode == 0, before["tasks"].stdout + before["tasks"].stderr
    for stage in STAGES[1:]:  # each names what stage 1 writes, which is not there yet
        assert before[stage].returncode == 2 and "runs/qwen3_8b_retail/tasks/tasks.json" in before[stage].stdout + before[stage].stderr

    generated = ctu(tmp_path, "tasks", "generate", str(RECIPE / "tasks.yaml"), "task_generation.generator={type: template, templates: retail}",
                    "task_generation.count=6", "--out", "runs/qwen3_8b_retail/tasks", "--no-progress")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert ctu(tmp_path, "validate", str(RECIPE / "train.yaml")).returncode == 0
    sft = ctu(tmp_path, "validate", str(RECIPE / "sft.yaml"))
    assert sft.returncode == 2 and "data.sft" in sft.stdout + sft.stderr

    (runs / "sft_data").mkdir(parents=True)
    messages = [{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    pq.write_table(pa.table({"messages": [messages] * 3, "tools": ["[]"] * 3}), runs / "sft_data" / "train.parquet")
    sft = ctu(tmp_path, "validate", str(RECIPE / "sft.yaml"))
    assert sft.returncode == 0, sft.stdout + sft.stderr
    grpo = ctu(tmp_path, "validate", str(RECIPE / "grpo.yaml"))
    assert grpo.returncode == 2 and "global_step_300/policy" in grpo.stdout + grpo.stderr and "names a run's export" in grpo.stdout + grpo.stderr

    export = runs / "sft" / "exports" / "global_step_300" / "policy"
    export.mkdir(parents=True)
    (export / "config.json").write_text("{}")
    grpo = ctu(tmp_path, "validate", str(RECIPE / "grpo.yaml"))
    assert grpo.returncode == 0, grpo.stdout + grpo.stderr


def test_the_chain_checks_stages_are_valid_once_the_stages_before_them_ran(tmp_path: Path):
    """`specs/learning_chain/` (benchmarks/chain_check.py): its template set yields verified tasks with held-out
    ones and ones set apart for GRPO, the SFT data of the training tasks leaves every one of both out, and each stage
    validates."""
    import json

    chain = REPO / "specs" / "learning_chain"
    generated = ctu(tmp_path, "tasks", "generate", str(chain / "tasks.yaml"), f"task_generation.generator.templates={chain / 'templates.yaml'}",
                    "task_generation.count=24", "--out", "runs/learning_chain/tasks", "--no-progress")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    splits = json.loads((tmp_path / "runs" / "learning_chain" / "tasks" / "split_tasks.json").read_text())
    assert splits["validation"] and splits["rl"] and len(splits["base"]) == 24 and len(splits["train"]) >= 8
    assert not set(splits["train"]) & set(splits["rl"]) and not set(splits["rl"]) & set(splits["validation"])
    assert not set(splits["train"]) & set(splits["validation"])
    written = ctu(tmp_path, "data", "sft", str(chain / "train.yaml"), "--out", "runs/learning_chain/sft_data")
    assert written.returncode == 0, written.stdout + written.stderr
    rows = pq.read_table(tmp_path / "runs" / "learning_chain" / "sft_data" / "train.parquet").to_pylist()
    # gold replays of every SFT task, none of the held-out or RL tasks
    assert sorted(row["task_id"] for row in rows) == sorted(splits["train"])
    sft = ctu(tmp_path, "validate", str(chain / "sft.yaml"))
    assert sft.returncode == 0, sft.stdout + sft.stderr
    small = ["trainer.train_batch_size=8", "trainer.policy_mini_batch_size=8", "backend.micro_train_batch_size_per_gpu=8"]  # >= 8 SFT tasks of the 24 here
    sft_skyrl = ctu(tmp_path, "validate", str(chain / "sft_skyrl.yaml"), *small)
    assert sft_skyrl.returncode == 0, sft_skyrl.stdout + sft_skyrl.stderr
