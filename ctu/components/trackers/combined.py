"""`Trackers`: a spec's trackers used as one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ctu.components.trackers.jsonl import JsonlTracker

BEST_VALIDATION = "best_validation.json"
"""The run directory's record of its best step on the validation set (`Trackers.log`)."""


class Trackers:
    """Several trackers used as one: `start`, `log` and `finish` go to each, in order. Where the logged metrics
    hold a validation success rate (`data.validation`), the best step so far is written to `best_validation.json`
    in the run directory: ``{"step", "success_rate", "average_reward"}``, the highest success rate, ties to the
    earlier step (a resumed run keeps the record)."""

    def __init__(self, trackers: list[object]) -> None:
        self.trackers = trackers
        self.run_dir: Path | None = None

    @classmethod
    def with_metrics_file(cls, trackers: list[object]) -> Trackers:
        """`trackers` (built), plus a `jsonl` tracker writing `metrics.jsonl` when none does: every run directory
        has that file."""
        trackers = list(trackers)
        if not any(isinstance(t, JsonlTracker) and t.params.filename == "metrics.jsonl" for t in trackers):
            trackers.append(JsonlTracker(JsonlTracker.Params()))
        return cls(trackers)

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None,
              tags: Sequence[str] = ()) -> None:
        """Start every tracker, with the run's `tags` (`experiment.tags`)."""
        self.run_dir = Path(run_dir)
        for tracker in self.trackers:
            tracker.start(run_dir, run_name, project, config, resume_step=resume_step, tags=list(tags))  # type: ignore[attr-defined]

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log to every tracker at the same `step`; keep `best_validation.json` up to date."""
        for tracker in self.trackers:
            tracker.log(metrics, step)  # type: ignore[attr-defined]
        self._record_best_validation(metrics, step)

    def _record_best_validation(self, metrics: Mapping[str, float], step: int) -> None:
        from ctu.metrics import VALIDATION, metric

        rate = metrics.get(metric(VALIDATION, "success_rate"))
        if rate is None or self.run_dir is None:
            return
        path = self.run_dir / BEST_VALIDATION
        best = json.loads(path.read_text()) if path.exists() else None
        if best is None or float(rate) > best["success_rate"]:
            record = {"step": step, "success_rate": float(rate),
                      "average_reward": metrics.get(metric(VALIDATION, "average_reward"))}
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record) + "\n")
            temporary.replace(path)  # never a half-written record

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
