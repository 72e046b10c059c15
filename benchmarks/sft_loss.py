"""SFT on both built-in backends from the same data: the loss per assistant token over the steps, and the wall time
of each run, on the learning chain's tasks (`specs/learning_chain/`) and the built-in model.

Run: `uv run python benchmarks/sft_loss.py [--steps N] [--lr LR] [--tinker-lr LR] [--lora-rank R] [--output DIR]`;
it writes under `runs/sft_loss/`.

The stages run as a user types them, each a `ctu` command in a new process from the repository's root:
`ctu tasks generate specs/learning_chain/tasks.yaml` (300 verified mock tasks, a fifth held out), `ctu data sft`
(the training tasks' gold replays), then the chain's SFT stage (`specs/learning_chain/sft.yaml`: batch 16) for
`--steps` steps on each backend, its test set left out (`!delete`) so only training is timed:

- `tinker`: the local Tinker server (SkyRL's, JAX backend), LoRA of rank `--lora-rank` at `--tinker-lr` (LoRA
  wants a higher rate than full fine-tuning);
- `skyrl`: SkyRL's `SFTTrainer`, every weight, at `--lr`, on a local Ray cluster of logical GPUs with the test suite's CPU
  stand-ins (`tests/skyrl_cpu/`, as `learning_check.py --backend skyrl-cpu` runs SkyRL; its wall time includes
  the cluster's start).

The loss is each step's `train/sft_loss_per_token` (nats per assistant token) from the run's `metrics.jsonl`. The
table is recorded in `benchmarks/results/sft_loss.json`, from which docs/recipes.md's table is generated;
`machine.py` gives the reference loop beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from chain_check import CPU_BACKEND, ctu
from learning_check import run_ctu, run_skyrl_cpu
from machine import reference_loop_seconds
from results import record

from ctu.runners.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs" / "learning_chain"
SHOWN_STEPS = (1, 10, 30)
"""The steps whose loss the table shows, besides the last."""


def write_specs(output: Path, steps: int, lr: float, tinker_lr: float, lora_rank: int) -> dict[str, Path]:
    """The specs of the data stage and of each backend's SFT run, pointing the chain's specs at `output`'s files:
    ``{"data": ..., "tinker": ..., "skyrl": ...}``."""
    tasks = {"type": "mock", "tasks_file": str(output / "tasks" / "tasks.json"),
             "split_file": str(output / "tasks" / "split_tasks.json")}
    paths = {"experiment": {"output_dir": str(output)},
             "data": {"train": [{"domain": tasks, "split": "train"}], "test_sets": {"heldout": {"domain": tasks}}}}
    (output / "paths.yaml").write_text(json.dumps(paths))
    (output / "data.yaml").write_text(json.dumps({"extends": [str(SPECS / "train.yaml"), str(output / "paths.yaml")]}))
    specs = {"data": output / "data.yaml"}
    for backend, extra, rate in (("tinker", [], tinker_lr), ("skyrl", [str(CPU_BACKEND)], lr)):
        extends = json.dumps([str(SPECS / "sft.yaml"), str(output / "paths.yaml"), *extra])
        specs[backend] = output / f"sft_{backend}.yaml"
        specs[backend].write_text(
            f"extends: {extends}\n"
            f"experiment: {{name: sft_{backend}}}\n"
            f"data:\n  sft: {json.dumps(str(output / 'sft_data'))}\n  test_sets:\n    heldout: !delete\n"
            f"trainer: {{max_steps: {steps}, hf_save_interval: 0, optimizer: {{lr: {rate}}}}}\n"
            + (f"backend: {{lora_rank: {lora_rank}}}\n" if backend == "tinker" else ""))
    return specs


def losses(run_dir: Path) -> dict[int, float]:
    """``{step: loss per assistant token}`` from a run's `metrics.jsonl`.

    Raises:
        SystemExit: the run logged no SFT loss.
    """
    found = {}
    for metrics in RunDir(run_dir).metric_lines():
        if "train/sft_loss_per_token" in metrics:
            found[int(metrics["step"])] = float(metrics["train/sft_loss_per_token"])
    if not found:
        raise SystemExit(f"no SFT loss in {run_dir / 'metrics.jsonl'}")
    return dict(sorted(found.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=6e-3, help="SkyRL's learning rate (the chain's)")
    parser.add_argument("--tinker-lr", type=float, default=1.5e-2, help="Tinker's learning rate (LoRA)")
    parser.add_argument("--lora-rank", type=int, default=64)
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "sft_loss")
    args = parser.parse_args()
    output = args.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    loop_before = reference_loop_seconds()
    print(f"machine reference loop: {loop_before:.3f} s; python {sys.version.split()[0]}")
    specs = write_specs(output, args.steps, args.lr, args.tinker_lr, args.lora_rank)
    ctu("tasks", "generate", str(SPECS / "tasks.yaml"), "--out", str(output / "tasks"), "--overwrite")
    ctu("data", "sft", str(specs["data"]), "--out", str(output / "sft_data"), "--no-progress")
    conversations = json.loads((output / "sft_data" / "sft_report.json").read_text())["rows"]
    walls, curves = {}, {}
    for backend, launch, flags in (("tinker", run_ctu, []), ("skyrl", run_skyrl_cpu, ["--no-progress"])):
        run_dir = output / f"sft_{backend}"
        started = time.perf_counter()
        code = launch(specs[backend], run_dir, flags)
        walls[backend] = time.perf_counter() - started
        if code != 0:
            raise SystemExit(f"the {backend} SFT run failed with exit code {code}")
        curves[backend] = losses(run_dir)
        print(f"{backend}: loss " + " ".join(f"{loss:.2f}" for loss in curves[backend].values())
              + f"; {walls[backend] / 60:.1f} min")
    loop = (loop_before + reference_loop_seconds()) / 2
    shown = [step for step in SHOWN_STEPS if step < args.steps] + [args.steps]
    what = {"tinker": f"`tinker`: LoRA rank {args.lora_rank}, lr {args.tinker_lr:g}",
            "skyrl": f"`skyrl` (SkyRL's `SFTTrainer`): every weight, lr {args.lr:g}"}
    columns = ["backend", *(f"loss at step {step}" for step in shown), "wall time of the run"]
    rows = [[what[backend], *(f"{curves[backend].get(step, float('nan')):.2f}" for step in shown),
             f"{walls[backend] / 60:.1f} min"] for backend in curves]
    record("sft_loss", {"steps": args.steps, "lr": args.lr, "tinker_lr": args.tinker_lr, "lora_rank": args.lora_rank,
                        "batch": 16, "conversations": conversations,
                        "loss_per_step": {backend: list(curve.values()) for backend, curve in curves.items()},
                        "wall_seconds": walls}, {"columns": columns, "rows": rows}, loop,
           note=f"The learning chain's SFT stage ({args.steps} steps of 16 conversations) on the gold replays of its "
                f"{conversations} generated training tasks, the built-in model; the loss in nats per assistant token; "
                "SkyRL's wall time includes its local Ray cluster's start.")


if __name__ == "__main__":
    main()
