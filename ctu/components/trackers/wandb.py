"""`wandb`: Weights & Biases, offline when no API key is set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ctu.registry import ComponentParams

if TYPE_CHECKING:
    import wandb


class WandbTracker:
    """Weights & Biases with the trainer's global step as the one step counter; offline when no API key is set.

    The run is finished by an explicit `finish()` at the end of training, never from a destructor (a
    `finish()` during interpreter shutdown hangs or loses data). The project is the run's
    (`ctu.composition.tracking_project`: `_with_taxonomy_feedback` appended when that reward is on) unless set here.
    """

    class Params(ComponentParams):
        project: str | None = None
        """Project, used as given; null uses the run's (`tracking.project`, with `_with_taxonomy_feedback` when that
        reward is on)."""
        entity: str | None = None
        """Team or user; null for the key's default."""
        mode: Literal["auto", "online", "offline", "disabled"] = "auto"
        """`auto`: online when the API key's environment variable is set, offline otherwise."""
        api_key_env: str = "WANDB_API_KEY"
        """Environment variable holding the API key."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.run: wandb.Run | None = None
        self.project: str | None = None
        self.mode: str | None = None
        self.last_step = -1

    def start(self, run_dir: Path, run_name: str, project: str, config: Mapping[str, object], resume_step: int | None = None,
              tags: Sequence[str] | None = None) -> None:
        """Open (or resume) the wandb run in `<run_dir>/wandb`, with the resolved spec as its config and the run's
        `tags` (`experiment.tags`) as wandb's. wandb's Weave
        integration (LLM call tracing, and its console advertisement when openai is imported) stays off unless
        ``WANDB_DISABLE_WEAVE`` is set: ctu's trajectories are in its own logs."""
        self.last_step = resume_step if resume_step is not None else -1
        import os

        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
        import wandb

        mode = self.params.mode
        if mode == "auto":
            mode = "online" if os.environ.get(self.params.api_key_env) else "offline"
        self.mode = mode
        self.project = self.params.project or project
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
            tags=list(tags or ()),
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
