"""Whole against step-wise trajectories (`rollout.trajectory`): what a GRPO step trains and how long it takes, on the
same spec.

Run: `uv run python benchmarks/step_wise.py [--steps N] [--tasks T] [--output DIR] [key=value ...]`.

Both runs are `uv run ctu run specs/smoke.yaml` on the tinker backend (SkyRL's Tinker API server with its JAX
backend, started on this machine), the built-in model, no evaluation, `--tasks` retail training tasks a step x 2
samples and episodes of up to 6 turns (`environment.max_turns`); the only difference is `rollout.trajectory:
step_wise`. The policy samples each turn from the same kind of ids either way (the turns before it, as sampled), but
training samples are not seeded, so the two runs play different episodes: compare per-episode figures, and the step
times with the turns an episode took (`environment/avg_turns`, printed too).

It prints, per run and as the mean over steps 2..N (step 1 compiles the JAX engine's shapes): the samples trained a
step (`train/trained_samples`: episodes, or policy turns), the tokens the trainer reads per episode
(`generation/sample_tokens_per_episode`: each sample's prompt and response; a step-wise episode re-reads its
prompt at each turn), the tokens the policy generated per episode (`generation/avg_response_length`, the tokens
trained either way), and the step's wall time split into sampling (`timing/generate`) and training
(`timing/train`: every `forward_backward` and the optimizer step). Recorded in `benchmarks/results/step_wise.json`
(`results.record`), from which docs/specs.md's table is generated.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import reference_loop_seconds
from results import record

from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
COMMON = ["data.test_sets={}", "trainer.eval_before_train=false", "trainer.eval_interval=0", "trainer.ckpt_interval=0",
          "trainer.hf_save_interval=0", "trainer.epochs=100", "tracking.trackers=[jsonl]", "environment.max_turns=6",
          "environment.user_simulator={type: scripted, turn_budget: 6}"]
MODES = {"whole": [], "step_wise": ["rollout.trajectory=step_wise"]}
FIGURES = {"trained_samples": "train/trained_samples", "sample_tokens": "generation/sample_tokens_per_episode",
           "policy_tokens": "generation/avg_response_length", "step_s": "timing/step", "generate_s": "timing/generate",
           "train_s": "timing/train", "turns": "environment/avg_turns"}
"""What each run reports, per step: the name in this benchmark's figures, and the run's metric."""


def run(name: str, out: Path, overrides: list[str]) -> dict[str, list[float]]:
    """One `ctu run` of the smoke spec; each of `FIGURES` per step, from the run's metrics."""
    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    args = ["specs/smoke.yaml", f"experiment.output_dir={out}", f"experiment.name={name}", *overrides, "--no-progress"]
    print("$ uv run ctu run", " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "ctu.cli", "run", *args], cwd=REPO)
    if result.returncode:
        raise SystemExit(f"{name}: ctu run exited {result.returncode}")
    return figures_of(run_dir)


def figures_of(run_dir: Path) -> dict[str, list[float]]:
    """Each of `FIGURES` per trained step, from the metrics of the run in `run_dir`."""
    steps = [line for line in RunDir(run_dir).metric_lines() if "timing/step" in line]
    return {figure: [float(line[name]) for line in steps] for figure, name in FIGURES.items()}


def later_mean(values: list[float]) -> float:
    """Mean over steps 2..N (step 1 compiles the engine's shapes), or step 1's alone."""
    return statistics.mean(values[1:] or values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per run (default 4)")
    parser.add_argument("--tasks", type=int, default=4, help="retail training tasks a step (default 4)")
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "step_wise")
    parser.add_argument("--report-only", action="store_true",
                        help="record the runs already in --output (their own steps and tasks) instead of running them")
    parser.add_argument("overrides", nargs="*", help="more spec overrides for both runs")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    loop = reference_loop_seconds()
    common = [*COMMON, f"data.train=[{{domain: retail, split: train, max_tasks: {args.tasks * args.steps}}}]",
              f"trainer.train_batch_size={args.tasks}", f"trainer.policy_mini_batch_size={args.tasks}",
              f"trainer.max_steps={args.steps}", *args.overrides]
    results: dict[str, dict] = {}
    for name, extra in MODES.items():
        started = time.perf_counter()
        figures = figures_of(args.output / name) if args.report_only else run(name, args.output, [*common, *extra])
        results[name] = {**figures, "wall_s": None if args.report_only else time.perf_counter() - started}
    print(f"\nreference loop {loop:.3f} s; {args.steps} steps a run, {args.tasks} tasks x 2 samples a step "
          "(means of steps 2..N)")
    for name, result in results.items():
        print(f"{name:>9}: " + ", ".join(f"{figure} {later_mean(result[figure]):.1f}" for figure in FIGURES)
              + ("" if result["wall_s"] is None else f"; run {result['wall_s']:.0f} s"))
    figures = {"steps": args.steps, "tasks": args.tasks, **results}
    record("step_wise", figures, table(results), loop,
           f"the tinker backend on this CPU, specs/smoke.yaml with up to 6 turns an episode, {args.tasks} retail tasks x 2 "
           f"samples a step, no evaluation; means of steps 2-{args.steps} (step 1 compiles the JAX engine's shapes).")
    return 0


def table(results: dict[str, dict]) -> dict[str, list]:
    """The docs' table (`results.record`): per mode, the samples and tokens trained, and the step's time."""
    rows = []
    whole = later_mean(results["whole"]["sample_tokens"])
    for label, name in (("`whole`", "whole"), ("`step_wise`", "step_wise")):
        result = results[name]
        tokens = later_mean(result["sample_tokens"])
        rows.append([label, f"{later_mean(result['turns']):.1f}", f"{later_mean(result['trained_samples']):.1f}", f"{later_mean(result['policy_tokens']):.0f}",
                     f"{tokens:,.0f}" + ("" if name == "whole" else f" ({tokens / whole:.1f}x)"),
                     f"{later_mean(result['generate_s']):.1f}", f"{later_mean(result['train_s']):.1f}",
                     f"{later_mean(result['step_s']):.1f}"])
    return {"columns": ["trajectory", "turns an episode", "samples trained a step", "policy tokens an episode",
                        "tokens the trainer reads an episode", "sampling, s", "training, s", "step, s"], "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
