"""Wall time of the README's main job (its Quickstart), `ctu run specs/smoke.yaml`, from an empty cache and with the built-in
model cached, as a new user runs it (a new process each time, `--no-progress`).

Run: `uv run python benchmarks/main_job.py [--warm-runs N]`. The first run gets an empty `CTU_CACHE_DIR`, so it
builds the built-in tiny model first; the next `--warm-runs` (default 2) reuse that cache. Each run writes into
its own new output folder. Prints each run's wall time and the time of its phases (model build, as `ctu run`
reports it; the training job, from its metrics), this machine's reference loop (`machine.py`) before and after,
and the times normalised to the loop of the goals' day. Goals from the cold-start issue, normalised: <= 6 min
from an empty cache, <= 3 min with the model cached. The figures and the table docs/benchmarks.md shows are
recorded in `benchmarks/results/main_job.json` (`results.record`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import missing, record

from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
GOAL_COLD_S = 6 * 60
GOAL_WARM_S = 3 * 60


def run_main_job(cache: Path, output: Path) -> tuple[float, dict]:
    """Wall seconds of one `ctu run specs/smoke.yaml` with `cache` as `CTU_CACHE_DIR`, and its last metrics line.

    Raises:
        SystemExit: the run failed (its output is printed).
    """
    env = {**os.environ, "CTU_CACHE_DIR": str(cache), "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    command = [sys.executable, "-m", "ctu.cli", "run", "specs/smoke.yaml", f"experiment.output_dir={output}", "--no-progress"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:], sep="\n")
        raise SystemExit(f"the main job failed with exit code {result.returncode}")
    return wall, RunDir(output / "smoke").metric_lines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-runs", type=int, default=2, help="runs with the model cached, after the cold one")
    args = parser.parse_args()

    loop_before = reference_loop_seconds()
    with tempfile.TemporaryDirectory(prefix="ctu-main-job-") as folder:
        cache = Path(folder) / "cache"
        runs = []
        for index in range(1 + args.warm_runs):
            wall, last = run_main_job(cache, Path(folder) / f"run{index}")
            runs.append(wall)
            kind = "empty cache " if index == 0 else "model cached"
            steps = len(RunDir(Path(folder) / f"run{index}" / "smoke").metric_lines())
            print(f"{kind}: {wall:6.1f} s wall ({steps} metric lines; last step's timing/step {last.get('timing/step', 0):.1f} s,"
                  f" timing/generate {last.get('timing/generate', 0):.1f} s)", flush=True)
    loop_after = reference_loop_seconds()
    loop = statistics.mean([loop_before, loop_after])
    cold, warm = runs[0], statistics.median(runs[1:]) if runs[1:] else float("nan")
    print(f"reference loop (10M additions): {loop_before:.2f} s before, {loop_after:.2f} s after; goals hold at {REFERENCE_LOOP_S:.2f} s")
    rows: list[list[str]] = []
    table: dict[str, list] = {"columns": ["", "measured", "normalised", "goal (normalised)"], "rows": rows}
    for name, seconds, goal in (("empty cache", cold, GOAL_COLD_S), (f"model cached (median of {args.warm_runs})", warm, GOAL_WARM_S)):
        scaled = normalised(seconds, loop)
        print(f"{name:<22} {seconds / 60:5.2f} min measured, {scaled / 60:5.2f} min normalised;"
              f" goal <= {goal / 60:.0f} min -> {'met' if scaled <= goal else 'NOT met'}")
        rows.append([name, f"{seconds / 60:.2f} min", f"{scaled / 60:.2f} min", f"<= {goal / 60:.0f} min"])
        if scaled > goal:
            missing(table, len(rows) - 1, 2)
    record("main_job", {"runs_seconds": runs, "cold_seconds": cold, "warm_median_seconds": warm,
                        "loop_before": loop_before, "loop_after": loop_after},
           table, loop,
           note="`ctu run specs/smoke.yaml --no-progress`, a new process each time, the first with an empty `CTU_CACHE_DIR`.")


if __name__ == "__main__":
    main()
