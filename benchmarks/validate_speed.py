"""Wall time of `ctu validate` on one spec, cold (a new process each run), warm (in-process) and through `uv run`.

Run: `uv run python benchmarks/validate_speed.py [SPEC] [--runs N]`. Prints medians, this machine's reference
loop (`machine.py`) and the cold median normalised to the goals' day; the goal is <= 0.6 s cold, normalised (the
bad-input issue). Then `uv run ctu validate SPEC` (as the README's users type it) against the environment's own
`ctu validate`, interleaved: what `uv run` adds (its check that the environment is in sync) must stay within
0.3 s normalised, and `uv run` must print nothing of its own (the rollout-scale issue: with `compile-bytecode`
set it re-compiled ~31,500 files and said so at every command). The figures are recorded in
`benchmarks/results/validate_speed.json`, from which docs/benchmarks.md's table is generated.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import missing, record

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 0.6
UV_GOAL_S = 0.3


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

    load_spec(args.spec)  # imports and the registry's entry points happen once per process
    warm = []
    for _ in range(args.runs):
        start = time.perf_counter()
        load_spec(args.spec)
        warm.append(time.perf_counter() - start)

    uv = shutil.which("uv")
    through_uv, own, printed, own_lines = [], [], set(), set()
    for _ in range(args.runs if uv else 0):
        for command, times in (([uv, "run", "ctu", "validate", args.spec], through_uv),
                               ([str(Path(sys.executable).parent / "ctu"), "validate", args.spec], own)):
            start = time.perf_counter()
            done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
            times.append(time.perf_counter() - start)
            (printed if times is through_uv else own_lines).update((done.stdout + done.stderr).splitlines())

    median = statistics.median(cold)
    loop = reference_loop_seconds()
    scaled = normalised(median, loop)
    print(f"spec: {args.spec}")
    print(f"ctu validate, new process:  median {median:.3f} s  (min {min(cold):.3f}, max {max(cold):.3f}, {args.runs} runs)")
    print(f"load_spec, warm in-process: median {statistics.median(warm) * 1000:.1f} ms")
    print(f"reference loop (10M additions): {loop:.2f} s; normalised to {REFERENCE_LOOP_S:.2f} s: {scaled:.3f} s")
    print(f"goal: <= {GOAL_S:.1f} s cold, normalised -> {'met' if scaled <= GOAL_S else 'NOT met'}")
    spec_name = Path(args.spec).resolve().relative_to(REPO) if Path(args.spec).resolve().is_relative_to(REPO) else args.spec
    rows = [[f"`ctu validate {spec_name}`, a new process", f"{median:.3f} s", f"{scaled:.3f} s", f"<= {GOAL_S:.1f} s"],
            ["`load_spec`, warm, in-process", f"{statistics.median(warm) * 1000:.1f} ms", "", ""]]
    table: dict[str, list] = {"columns": ["", "median", "normalised", "goal (normalised)"], "rows": rows}
    if scaled > GOAL_S:
        missing(table, 0, 2)
    figures: dict[str, object] = {"spec": str(spec_name), "runs": args.runs, "cold_median_s": median, "cold_s": cold,
                                  "warm_median_s": statistics.median(warm), "cold_median_normalised_s": scaled}
    if not uv:
        print("uv is not on PATH: `uv run` not measured")
        record("validate_speed", figures, table, loop)
        return
    added = normalised(statistics.median(through_uv) - statistics.median(own), loop)
    printed -= own_lines  # what uv itself printed: ctu's own lines (a spec's warnings) come from both
    rows += [["`uv run ctu validate` against the environment's own `ctu validate`",
              f"{statistics.median(through_uv):.3f} s against {statistics.median(own):.3f} s",
              f"+{added:.3f} s", f"<= +{UV_GOAL_S:.1f} s"]]
    if added > UV_GOAL_S:
        missing(table, 2, 2)
    figures.update({"uv_run_median_s": statistics.median(through_uv), "own_median_s": statistics.median(own),
                    "uv_run_adds_normalised_s": added, "uv_run_printed": sorted(printed)})
    record("validate_speed", figures, table, loop,
           note=f"{args.runs} runs each; lines `uv run` printed besides ctu's own: {len(printed)}.")
    print(f"uv run ctu validate: median {statistics.median(through_uv):.3f} s; the environment's own ctu: median "
          f"{statistics.median(own):.3f} s; uv run adds {added:.3f} s normalised "
          f"(goal <= {UV_GOAL_S:.1f} s -> {'met' if added <= UV_GOAL_S else 'NOT met'})")
    print(f"lines uv run printed besides ctu's own: {len(printed)}" + "".join(f"\n  {line}" for line in sorted(printed)))


if __name__ == "__main__":
    main()
