"""The tracker seam."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol


class Tracker(Protocol):
    """Receives metrics keyed by `<area>/<name>` at the trainer's global step.

    `start` is called once before any `log`; `finish` once at the end, explicitly (never from a destructor).
    """

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object]) -> None: ...

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def finish(self) -> None: ...
