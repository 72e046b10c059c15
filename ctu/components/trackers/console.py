"""`console`: each step's metrics as a table on the terminal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from rich.console import Console


class ConsoleTracker:
    """Prints each step's metrics as a rich table on the terminal."""

    class Params(ComponentParams):
        every_n_steps: int = Field(1, gt=0)
        """Print every this many steps."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._console: Console | None = None

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None,
              tags: Sequence[str] | None = None) -> None:
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
