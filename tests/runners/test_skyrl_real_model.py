"""A real pretrained model through SkyRL's real trainer on CPU: SmolLM2-135M-Instruct (`builtin:smollm2-135m-instruct`,
its own 49k tokenizer, ChatML template and tied embeddings) trained two GRPO steps by `uv run ctu run`, as a user
launches it, joining the tests' Ray cluster (vLLM's CPU build sampling, FSDP2 training: tests/skyrl_cpu/README.md).

Smaller than the spec (2 tasks x 2 samples, 2 turns of 48 tokens) for CI's time; `benchmarks/real_model.py --backend
skyrl` runs it as written and records the step's cost. The same model on the tinker backend is that benchmark's
`--backend tinker` (`specs/smollm2.yaml`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctu.runners.rundir import RunDir
from tests.skyrl_cpu.cluster import RayCluster, ctu_run

from ..conftest import REPO

SPEC = REPO / "tests" / "skyrl_cpu" / "smollm2_skyrl.yaml"
SMALLER = ["data.train=[{domain: mock, split: base, max_tasks: 2}]", "trainer.train_batch_size=2",
           "trainer.policy_mini_batch_size=2", "environment.max_turns=2", "rollout.max_tokens_per_turn=48"]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[RayCluster]:
    """The tests' own Ray cluster (stopped at the end, with nothing else)."""
    with RayCluster(tmp_path_factory.mktemp("ray") / "ray.log") as head:
        yield head


def test_two_grpo_steps_of_smollm2_on_skyrls_trainer_keep_its_embeddings_tied_and_its_sampler_on_policy(
        ray_head: RayCluster, tmp_path: Path):
    result = ctu_run([str(SPEC), f"experiment.output_dir={tmp_path}", "experiment.name=run", *SMALLER],
                     {"RAY_ADDRESS": ray_head.address})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    console = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    assert "done step 2" in console and "it/s]" not in console  # no library's progress bar on ctu's console
    run = tmp_path / "run"
    lines = [line for line in RunDir(run).metric_lines() if "timing/generate" in line]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert line["generation/num_trajectories"] == 4.0 and "policy/grad_norm" in line
        # the sampler (vLLM, fp32) and the trainer (FSDP2, fp32) agree on every sampled token, within numerical noise:
        # the model's tied output projection served as trained (docs/running.md's bound for on-policy training)
        assert line["train/logprob_gap_tokens"] > 0 and line["train/logprob_gap_mean"] < 0.005
        assert line["train/logprob_gap_frac_over"] == 0.0
        # counted, not assumed 0: a real BPE model may sample ids its tokenizer would encode otherwise (a
        # non-canonical split), and later prompts of that episode then differ from the template's rendering
        # (tests/rollout/test_template_tokens.py checks that canonical samples give none); 2 on one CI run
        assert line["generation/off_template_turns"] >= 0.0 and float(line["generation/off_template_turns"]).is_integer()
    calls = "".join(log.read_text(errors="replace") for log in (run / "logs").glob("infra-*.log"))
    assert "tied embeddings kept tied" in calls and "tied embeddings still tied after an optimizer step" in calls
    # vLLM reloaded the starting weights, then served each step's trained weights
    assert calls.count("Reloading and processing weights took") == 3
    [record, *_] = [json.loads(text) for text in (run / "trajectories" / "train_step000001.jsonl").read_text().splitlines()]
    system = record["messages"][0]["content"]
    assert "<tools>" in system and "create_task" in system  # text mode: the hermes parser rendered the tools
    assert isinstance(record["off_template_turns"], list) and all(m["role"] in {"system", "user", "assistant", "tool"} for m in record["messages"])
    page = tmp_path / "view.html"
    viewed = subprocess.run([sys.executable, "-m", "ctu.cli", "view", str(run), "--out", str(page)], cwd=REPO,
                            capture_output=True, text=True)
    assert viewed.returncode == 0, viewed.stderr
    assert "create_task" in page.read_text()
