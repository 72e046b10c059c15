"""The built-in trackers: `console` and `jsonl` here; `wandb` and `tensorboard` take their params here too."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Literal

from pydantic import Field

from ctu.registry import ComponentParams, registry


@registry.trackers.register("console")
class ConsoleTracker:
    """Prints each step's metrics as a rich table on the terminal."""

    class Params(ComponentParams):
        every_n_steps: int = Field(1, gt=0)
        """Print every this many steps."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._console = None

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None) -> None:
        """Open the console (rich) and print the run's name (`resume_step`: the step a resumed run continues from)."""
        from rich.console import Console

        self._console = Console()
        self._console.print(f"[bold]{project}[/bold] / {run_name}  ->  {run_dir}")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Print `metrics` sorted by name, when `step` is a multiple of `every_n_steps`."""
        if self._console is None:
            raise RuntimeError("ConsoleTracker.log called before start()")
        if step % self.params.every_n_steps:
            return
        from rich.table import Table

        table = Table(title=f"step {step}", show_header=False, box=None)
        for name in sorted(metrics):
            table.add_row(name, f"{metrics[name]:.4g}")
        self._console.print(table)

    def finish(self) -> None:
        """Nothing to flush."""
        self._console = None


@registry.trackers.register("jsonl")
class JsonlTracker:
    """Appends one JSON object per step, `{"step": N, "<area>/<name>": value, ...}`, to a file in the run directory."""

    class Params(ComponentParams):
        filename: str = Field("metrics.jsonl", min_length=1)
        """File name, relative to the run directory."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._file: IO[str] | None = None

    @property
    def path(self) -> Path | None:
        """The file written to, once started."""
        return Path(self._file.name) if self._file else None

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None) -> None:
        """Open `<run_dir>/<filename>` for appending. A resumed run (`resume_step` set) first drops the lines of
        later steps, which it is about to run again, so no metric line is duplicated or lost."""
        path = Path(run_dir) / self.params.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text(encoding="utf-8").splitlines() if json.loads(line)["step"] <= resume_step]
            path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Write one line and flush it. Non-finite values are written as null (JSON has no NaN)."""
        if self._file is None:
            raise RuntimeError("JsonlTracker.log called before start()")
        record: dict[str, object] = {"step": step}
        for name, value in sorted(metrics.items()):
            number = float(value)
            record[name] = number if math.isfinite(number) else None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def finish(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


TAXONOMY_SUFFIX = "_with_taxonomy_feedback"
"""Appended to the wandb project when the `taxonomy_feedback` reward is on, so such runs never mix with others."""


def uses_taxonomy_feedback(config: Mapping[str, object]) -> bool:
    """Whether a resolved spec (as a mapping) has the `taxonomy_feedback` reward."""
    rewards = config.get("rewards") or []
    return any(isinstance(r, Mapping) and r.get("type") == "taxonomy_feedback" for r in rewards)  # type: ignore[union-attr]


@registry.trackers.register("wandb")
class WandbTracker:
    """Weights & Biases with the trainer's global step as the one step counter; offline when no API key is set.

    The run is finished by an explicit `finish()` at the end of training, never from a destructor (a
    `finish()` during interpreter shutdown hangs or loses data). The project gets `_with_taxonomy_feedback`
    when the spec's rewards include `taxonomy_feedback`.
    """

    class Params(ComponentParams):
        project: str | None = None
        """Project; null uses `tracking.project` (with `_with_taxonomy_feedback` when that reward is on)."""
        entity: str | None = None
        """Team or user; null for the key's default."""
        mode: Literal["auto", "online", "offline", "disabled"] = "auto"
        """`auto`: online when the API key's environment variable is set, offline otherwise."""
        api_key_env: str = "WANDB_API_KEY"
        """Environment variable holding the API key."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.run = None
        self.project: str | None = None
        self.mode: str | None = None
        self.last_step = -1

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None) -> None:
        """Open (or resume) the wandb run in `<run_dir>/wandb`, with the resolved spec as its config."""
        self.last_step = resume_step if resume_step is not None else -1
        import os

        import wandb

        mode = self.params.mode
        if mode == "auto":
            mode = "online" if os.environ.get(self.params.api_key_env) else "offline"
        self.mode = mode
        self.project = (self.params.project or project) + (TAXONOMY_SUFFIX if uses_taxonomy_feedback(config) else "")
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        run_id = "".join(c if c.isalnum() else "-" for c in f"{run_name}-{Path(run_dir).resolve().name}")[:64]
        self.run = wandb.init(
            project=self.project,
            entity=self.params.entity,
            name=run_name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=dict(config),
            mode=mode,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log `metrics` at the trainer's global `step` (the only step counter).

        Raises:
            ValueError: `step` is below the last one (wandb would silently drop the metrics).
        """
        if self.run is None:
            raise RuntimeError("WandbTracker.log called before start()")
        if step < self.last_step:
            raise ValueError(f"wandb steps must not go back: step {step} after step {self.last_step}")
        self.last_step = step
        self.run.log(dict(metrics), step=step)

    def finish(self) -> None:
        """Finish the run explicitly."""
        if self.run is not None:
            self.run.finish()
            self.run = None


@registry.trackers.register("tensorboard")
class TensorboardTracker:
    """TensorBoard event files in the run directory, one scalar per metric at the trainer's global step."""

    class Params(ComponentParams):
        log_dir: str = Field("tensorboard", min_length=1)
        """Folder for event files, relative to the run directory."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.writer = None

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None) -> None:
        """Open an event-file writer in `<run_dir>/<log_dir>` (a resumed run purges events after `resume_step`)."""
        from torch.utils.tensorboard import SummaryWriter

        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / self.params.log_dir), purge_step=purge)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """One scalar per metric at `step`."""
        if self.writer is None:
            raise RuntimeError("TensorboardTracker.log called before start()")
        for name, value in metrics.items():
            self.writer.add_scalar(name, float(value), global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        """Close the writer."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class Trackers:
    """Several trackers used as one: `start`, `log` and `finish` go to each, in order."""

    def __init__(self, trackers: list[object]) -> None:
        self.trackers = trackers

    @classmethod
    def with_metrics_file(cls, trackers: list[object]) -> Trackers:
        """`trackers` (built), plus a `jsonl` tracker writing `metrics.jsonl` when none does: every run directory
        has that file."""
        trackers = list(trackers)
        if not any(isinstance(t, JsonlTracker) and t.params.filename == "metrics.jsonl" for t in trackers):
            trackers.append(JsonlTracker(JsonlTracker.Params()))
        return cls(trackers)

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None) -> None:
        """Start every tracker."""
        for tracker in self.trackers:
            tracker.start(run_dir, run_name, project, config, resume_step=resume_step)  # type: ignore[attr-defined]

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log to every tracker at the same `step`."""
        for tracker in self.trackers:
            tracker.log(metrics, step)  # type: ignore[attr-defined]

    def finish(self) -> None:
        """Finish every tracker, even when one fails (the first failure is raised after)."""
        error: BaseException | None = None
        for tracker in self.trackers:
            try:
                tracker.finish()  # type: ignore[attr-defined]
            except Exception as exc:  # finish the others first
                error = error or exc
        if error is not None:
            raise error
