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

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object]) -> None:
        """Open the console (rich) and print the run's name."""
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

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object]) -> None:
        """Open `<run_dir>/<filename>` for appending (a resumed run continues the same file)."""
        path = Path(run_dir) / self.params.filename
        path.parent.mkdir(parents=True, exist_ok=True)
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


@registry.trackers.register("wandb")
class WandbTracker:
    """Weights & Biases with the trainer's step as the one step counter; offline when no API key is set."""

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


@registry.trackers.register("tensorboard")
class TensorboardTracker:
    """TensorBoard event files in the run directory."""

    class Params(ComponentParams):
        log_dir: str = Field("tensorboard", min_length=1)
        """Folder for event files, relative to the run directory."""

    def __init__(self, params: Params) -> None:
        self.params = params
