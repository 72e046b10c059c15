"""Wall time of `ctu validate` on one spec, cold (a new process each run) and warm (in-process).

Run: `uv run python benchmarks/validate_speed.py [SPEC] [--runs N]`. Prints medians, this machine's reference
loop (`machine.py`) and the cold median normalised to the goals' day; the goal is <= 0.6 s cold, normalised (the bad-input issue).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 0.6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec", nargs="?", default=str(REPO / "specs" / "tau_bench.yaml"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    command = [sys.executable, "-m", "ctu.cli", "validate", args.spec]
    cold = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=REPO)
        cold.append(time.perf_counter() - start)

    from ctu.spec import load_spec

    load_spec(args.spec)  # imports and registry population happen once per process
    warm = []
    for _ in range(args.runs):
        start = time.perf_counter()
        load_spec(args.spec)
        warm.append(time.perf_counter() - start)

    median = statistics.median(cold)
    loop = reference_loop_seconds()
    scaled = normalised(median, loop)
    print(f"spec: {args.spec}")
    print(f"ctu validate, new process:  median {median:.3f} s  (min {min(cold):.3f}, max {max(cold):.3f}, {args.runs} runs)")
    print(f"load_spec, warm in-process: median {statistics.median(warm) * 1000:.1f} ms")
    print(f"reference loop (10M additions): {loop:.2f} s; normalised to {REFERENCE_LOOP_S:.2f} s: {scaled:.3f} s")
    print(f"goal: <= {GOAL_S:.1f} s cold, normalised -> {'met' if scaled <= GOAL_S else 'NOT met'}")


if __name__ == "__main__":
    main()
