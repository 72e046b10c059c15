"""`Trackers`: a spec's trackers used as one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctu.components.trackers.jsonl import JsonlTracker


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
