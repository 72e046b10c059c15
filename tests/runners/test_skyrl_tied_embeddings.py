"""Tied word embeddings stay tied in SkyRL's FSDP2 workers (`ctu.backends.skyrl.tied_embeddings`): SkyRL 0.4.0's
own strategy, two ranks on gloo with the CPU shim, a tied tiny Qwen3 trained two steps; without ctu's fix (broken on
purpose) the output projection parts from the embedding, as it does in SkyRL alone, and a sampler serving the trained
weights as vLLM serves a tied model drifts from the trainer, after each step, past the gap an untied copy gives
(`tests/skyrl_cpu/fsdp_tie.py`; transformers stands in for vLLM's loader there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctu.backends.tinker.server import free_port

from ..conftest import REPO


def two_ranks(tmp_path: Path, *flags: str) -> list[dict]:
    """`tests.skyrl_cpu.fsdp_tie` on two ranks; each rank's report."""
    tmp_path.mkdir()
    port = free_port()
    outs = [tmp_path / f"rank{rank}.json" for rank in range(2)]
    ranks = [subprocess.Popen([sys.executable, "-m", "tests.skyrl_cpu.fsdp_tie", str(rank), "2", str(port), str(out), *flags],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, out in enumerate(outs)]
    logs = [process.communicate(timeout=300)[0] for process in ranks]
    for process, log in zip(ranks, logs, strict=True):
        assert process.returncode == 0, log[-4000:]
    return [json.loads(out.read_text()) | {"log": log} for out, log in zip(outs, logs, strict=True)]


def test_every_rank_keeps_the_output_projection_the_embeddings_storage_and_without_the_fix_it_parts(tmp_path: Path):
    untied = two_ranks(tmp_path / "untied", "--untied")
    bound = max(untied[0]["logprob_gap_means"])  # on-policy: the trainer's bf16 against the sampler's fp32, nothing more
    assert len(untied[0]["logprob_gap_means"]) == 2 and 0.0 < bound < 0.05
    fixed = two_ranks(tmp_path / "fixed")
    for rank in fixed:
        assert rank["tied_after_init"] and rank["tied_after_step"], rank
        assert f"rank {rank['rank']}: tied embeddings kept tied" in rank["log"]
        assert f"rank {rank['rank']}: tied embeddings still tied after an optimizer step" in rank["log"]
    assert fixed[0]["head_minus_embedding_max"] == 0.0  # one matrix, trained once a step
    assert all(gap < 2 * bound for gap in fixed[0]["logprob_gap_means"])  # the sampler serves what the trainer trained
    broken = two_ranks(tmp_path / "broken", "--no-fix")
    for rank in broken:
        assert not rank["tied_after_init"] and not rank["tied_after_step"], rank
        assert rank["optimizer_params"] == fixed[0]["optimizer_params"] + 1  # a second matrix, trained apart
    assert broken[0]["head_minus_embedding_max"] > 1e-4  # the steps moved them apart
    assert all(gap > 10 * bound for gap in broken[0]["logprob_gap_means"])  # the sampler, serving the embedding as the head, drifted
