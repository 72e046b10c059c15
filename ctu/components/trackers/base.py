"""The tracker seam."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ctu.registry import registry


class Tracker(Protocol):
    """Receives metrics keyed by `<area>/<name>` at the trainer's global step.

    `start` is called once before any `log`; `finish` once at the end, explicitly (never from a destructor).
    """

    def start(
        self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], *, resume_step: int | None = None,
        tags: Sequence[str] | None = None,
    ) -> None:
        """Open the tracker; `resume_step` is set when a resumed run continues after that step; `tags` are the run's
        (`experiment.tags`; a tracker whose `start` takes no `tags` is called without, with a deprecation warning)."""
        ...

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record `metrics` at the trainer's global `step`."""
        ...

    def finish(self) -> None:
        """Flush and close; called once, explicitly."""
        ...


registry.trackers.declare_contract(Tracker)
