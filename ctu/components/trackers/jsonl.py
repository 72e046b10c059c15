"""`jsonl`: one JSON line of metrics per step in the run directory."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from pydantic import Field

from ctu.jsonl import text_lines
from ctu.registry import ComponentParams


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

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None,
              tags: Sequence[str] | None = None) -> None:
        """Open `<run_dir>/<filename>` for appending. A resumed run (`resume_step` set; -1 when it starts over)
        first sets aside the lines of later steps, which it is about to run again, and any line that is not a whole
        metric line (one a kill cut short), under ``superseded/`` (`ctu.output_folders.set_aside`): no metric line is
        duplicated, and none is deleted."""
        from ctu.output_folders import set_aside

        path = Path(run_dir) / self.params.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and path.exists():
            lines = text_lines(path, errors="replace")
            keep = [(step := _step_of(line)) is not None and step <= resume_step for line in lines]
            kept = [line for line, keeping in zip(lines, keep, strict=True) if keeping]
            if replayed := [line for line, keeping in zip(lines, keep, strict=True) if not keeping and line.strip()]:
                set_aside(Path(run_dir), self.params.filename, replayed)
            temporary = path.with_name(path.name + ".tmp")
            temporary.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            temporary.replace(path)
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


def _step_of(line: str) -> int | None:
    """The step of a metric line; None for anything else (a line cut short, an empty one)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None
