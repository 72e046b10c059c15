"""`ctu run`: from a spec file (or a run directory to resume) to the spec's backend (`ctu.runners.backend`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.runners.backend import backend_of
from ctu.runners.console import silence_progress_bars
from ctu.runners.rundir import RunDir, RunError
from ctu.spec import LoadedSpec, Spec, load_spec, spec_hash

if TYPE_CHECKING:
    from rich.console import Console

RESULTS = ("metrics.jsonl", "state.json", "trajectories", "checkpoints", "plots", "tensorboard", "wandb", "tinker", "data",
           "exports", "logs")
"""What a run writes into its directory, on either backend (removed by `--overwrite`; SkyRL adds `exports`, `logs`)."""


def _print_warnings(loaded: LoadedSpec, console: Console) -> None:
    from rich.markup import escape

    for issue in loaded.warnings:
        console.print("[yellow]warning[/yellow]", escape(str(issue)), highlight=False)


def resolve_run_spec(spec_path: str | None, overrides: list[str], smoke: bool, resume: Path | None) -> tuple[LoadedSpec, Path | None]:
    """The spec to run (with its warnings) and, when resuming, its run directory.

    Raises:
        SpecError: bad spec or overrides. RunError: a resume that does not match the spec given.
    """
    if resume is not None:
        resolved = resume / "spec.resolved.yaml"
        if not resolved.exists():
            raise RunError(f"{resume} is not a run directory (no spec.resolved.yaml)")
        loaded = load_spec(resolved, overrides)
        if spec_path is not None:
            given = load_spec(spec_path, overrides).spec
            if smoke:
                from ctu.runners.smoke import smoke_spec

                given = smoke_spec(given).spec
            if spec_hash(given) != spec_hash(loaded.spec):
                raise RunError(f"{spec_path} differs from the spec of the run in {resume}; resume without naming a spec")
        return loaded, resume
    assert spec_path is not None
    loaded = load_spec(spec_path, overrides)
    if smoke:
        from ctu.runners.smoke import smoke_spec

        loaded = smoke_spec(loaded.spec)
    return loaded, None


def launch(spec_path: str | None, overrides: list[str], *, smoke: bool = False, dry_run: bool = False,
           resume: Path | None = None, overwrite: bool = False, progress: bool = True, verbose: bool = False,
           console: Console) -> None:
    """Run (or, with `dry_run`, describe) a spec on its backend; without `progress`, no progress bar at all (ctu's
    or any library's: `ctu.runners.console.silence_progress_bars`); with `verbose`, the libraries' logs live too.

    Raises:
        SpecError, RunError, PreflightError, TinkerServerError: as their runners do.
    """
    loaded, run_path = resolve_run_spec(spec_path, overrides, smoke, resume)
    _print_warnings(loaded, console)
    spec = loaded.spec
    run_dir = RunDir(run_path) if run_path is not None else RunDir.of(spec)
    if dry_run:
        _dry_run(spec, run_dir, console)
        return
    if resume is None and run_dir.state_file.exists():
        if not overwrite:
            raise RunError(f"{run_dir.path} already holds a run; use --resume {run_dir.path}, --overwrite, or another experiment.name")
        for name in RESULTS:
            target = run_dir.path / name
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    if not progress:
        silence_progress_bars()
    for model in {spec.model.path, spec.model.reference_path or spec.model.path}:
        build_builtin_model(model, console, progress)
    step = backend_of(spec).run(spec, run_dir, resume=resume is not None, progress=progress, verbose=verbose)
    console.print(f"[green]done[/green] step {step}; results in {run_dir.path}")


def build_builtin_model(model: str, console: Console, progress: bool = True) -> None:
    """Build a ``builtin:`` model that is not cached yet, saying so first and showing the build's progress (a
    rich bar, or a line per phase without `progress`); nothing for other models or a cached build."""
    from ctu.models.tiny_qwen3 import BUILD_MINUTES, is_built, is_builtin, resolve

    if not is_builtin(model) or is_built():
        return
    console.print(f"building {model}: first run only, about {BUILD_MINUTES} min on 2 cores (cached afterwards)")
    if not progress:
        phases: list[str] = []

        def report(phase: str, done: int, total: int) -> None:
            if not phases or phases[-1] != phase:
                phases.append(phase)
                console.print(f"  {phase}", markup=False, highlight=False)

        resolve(model, progress=report)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("starting", total=1)
        resolve(model, progress=lambda phase, done, total: bar.update(task, description=phase, completed=done, total=total))


def _dry_run(spec: Spec, run_dir: RunDir, console: Console) -> None:
    plan = backend_of(spec).plan(spec, run_dir)
    console.print(f"[bold]# {plan.title}[/bold]")
    console.print(plan.config, markup=False, highlight=False)
    console.print("[bold]# launch plan[/bold]")
    for number, line in enumerate(plan.steps, 1):
        console.print(f"{number}. {line}", markup=False, highlight=False)
