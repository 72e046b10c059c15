"""`tensorboard`: TensorBoard event files in the run directory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorboardTracker:
    """TensorBoard event files in the run directory, one scalar per metric at the trainer's global step."""

    class Params(ComponentParams):
        log_dir: str = Field("tensorboard", min_length=1)
        """Folder for event files, relative to the run directory."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.writer: SummaryWriter | None = None

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None,
              tags: Sequence[str] | None = None) -> None:
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
