"""`ctu run`: from a spec file (or a run directory to resume) to the spec's backend (`ctu.runners.backend`)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ctu.runners.backend import backend_of
from ctu.runners.console import silence_progress_bars
from ctu.runners.rundir import RunDir, RunError
from ctu.spec import LoadedSpec, Spec, data_hash, load_spec, spec_hash
from ctu.spec.paths import absolute_paths

if TYPE_CHECKING:
    from rich.console import Console

RESULTS = ("metrics.jsonl", "state.json", "trajectories", "checkpoints", "plots", "tensorboard", "wandb", "tinker", "data",
           "exports", "logs", "skyrl_config.yaml", "spec_changes.jsonl", "superseded")
"""What a run writes into its directory, on either backend (removed by `--overwrite`; SkyRL adds `exports`, `logs`,
`skyrl_config.yaml`)."""


def _print_warnings(loaded: LoadedSpec, console: Console) -> None:
    from rich.markup import escape

    for issue in loaded.warnings:
        console.print("[yellow]warning[/yellow]", escape(str(issue)), highlight=False)


RESUMABLE_CHANGES = ("trainer.max_steps", "trainer.epochs")
"""Spec entries a resume may change without `--allow-spec-change`: they lengthen or shorten the same experiment."""


def spec_changes(before: object, after: object, path: str = "") -> list[str]:
    """The dotted keys whose values differ between two resolved specs' data (a list's items by index)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [change for key in sorted(set(before) | set(after), key=str)
                for change in spec_changes(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [change for n, (a, b) in enumerate(zip(before, after)) for change in spec_changes(a, b, f"{path}.{n}")]
    return [] if before == after else [path]


def resolve_run_spec(spec_path: str | None, overrides: list[str], smoke: bool, resume: Path | None,
                     allow_spec_change: bool = False) -> tuple[LoadedSpec, Path | None, list[str]]:
    """The spec to run (with its warnings), when resuming its run directory, and the spec keys the resume changes.
    The local files a new run's spec names are made absolute (`ctu.spec.paths.absolute_paths`): its Ray workers, a
    resume and `ctu eval --run-dir` read the same files from any folder.

    A resume runs the run's own spec, on the backend that wrote it: overrides may change `RESUMABLE_CHANGES` only,
    and the run's ``spec.resolved.yaml`` must still be the spec it started with (its hash in ``spec.sha256``),
    unless `allow_spec_change` (then `launch` records the change in the run directory).

    Raises:
        SpecError: bad spec or overrides. RunError: not a run directory (or an unreadable one), a spec given that
            differs from the run's, another backend than the run's, or a change of the experiment without
            `allow_spec_change`.
    """
    if resume is None:
        assert spec_path is not None
        loaded = load_spec(spec_path, overrides)
        if smoke:
            from ctu.runners.smoke import smoke_spec

            loaded = smoke_spec(loaded.spec)
        return replace(loaded, spec=absolute_paths(loaded.spec)), None, []
    resolved = resume / "spec.resolved.yaml"
    if not resume.is_dir():
        raise RunError(f"--resume {resume}: no such directory")
    if not resolved.exists():
        raise RunError(f"--resume {resume}: not a run directory (no spec.resolved.yaml)")
    loaded = load_spec(resolved, overrides)
    if spec_path is not None:
        given = load_spec(spec_path, overrides).spec
        if smoke:
            from ctu.runners.smoke import smoke_spec

            given = smoke_spec(given).spec
        if spec_hash(absolute_paths(given)) != spec_hash(loaded.spec):
            raise RunError(f"{spec_path} differs from the spec of the run in {resume}; resume without naming a spec")
    return loaded, resume, _resume_changes(RunDir(resume), loaded.spec, allow_spec_change)


def launch(spec_path: str | None, overrides: list[str], *, smoke: bool = False, dry_run: bool = False,
           resume: Path | None = None, overwrite: bool = False, progress: bool = True, verbose: bool = False,
           allow_spec_change: bool = False, console: Console) -> None:
    """Run (or, with `dry_run`, describe) a spec on its backend, with ctu's own progress bars unless not `progress`
    and never a library's (`ctu.runners.console.silence_progress_bars`); with `verbose`, the libraries' logs live
    too.
    A resume with `allow_spec_change` may change what the run trains; the change is recorded in
    ``spec_changes.jsonl``.

    Raises:
        SpecError, RunError, PreflightError, TinkerServerError: as their runners do.
    """
    if resume is not None and overwrite:
        raise RunError("--resume continues a run and --overwrite deletes it: choose one")
    loaded, run_path, changes = resolve_run_spec(spec_path, overrides, smoke, resume, allow_spec_change)
    _print_warnings(loaded, console)
    spec = loaded.spec
    run_dir = RunDir(run_path) if run_path is not None else RunDir.of(spec)
    if dry_run:
        _dry_run(spec, run_dir, console)
        return
    _refuse_held_out_copies(spec)
    if resume is None and run_dir.state_file.exists():
        if not overwrite:
            raise RunError(f"{run_dir.path} already holds a run; use --resume {run_dir.path}, --overwrite, or another experiment.name")
        for name in RESULTS:
            target = run_dir.path / name
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    if changes:
        _record_spec_change(run_dir, spec, changes)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    if resume is not None and (lost := run_dir.lost_metric_steps()):
        console.print(f"[yellow]warning:[/yellow] {run_dir.metrics_file} has no line for step(s) "
                      f"{', '.join(map(str, lost))}, which the run completed (the file was cut or edited): their figures "
                      "are lost and the resume does not train them again; their checkpoints and trajectories are kept")
    silence_progress_bars()  # the libraries' bars (Hugging Face's loading and saving, tqdm's): ctu's are its own
    for model in {spec.model.path, spec.model.reference_path or spec.model.path}:
        build_builtin_model(model, console, progress)
    step = backend_of(spec).run(spec, run_dir, resume=resume is not None, progress=progress, verbose=verbose)
    console.print(f"[green]done[/green] step {step}; results in {run_dir.path}")


def _refuse_held_out_copies(spec: Spec) -> None:
    """Refuse, before anything is written, a GRPO run whose training tasks hold a held-out task under another id
    (`ctu.runners.task_rows.held_out_copies`; by id, `ctu validate` refuses it).

    Raises:
        RunError: naming each copy.
    """
    if spec.data.sft is not None:  # SFT data is checked where it is written (`ctu data sft`)
        return
    from ctu.composition import build_components
    from ctu.runners.task_rows import held_out_copies

    if copies := held_out_copies(build_components(spec)):
        raise RunError(f"{len(copies)} training task(s) are held-out tasks under another id (the same customer and "
                       f"database): {', '.join(copies[:10])}{' ...' if len(copies) > 10 else ''}; remove them from the "
                       "training tasks")


def _resume_changes(run_dir: RunDir, spec: Spec, allow_spec_change: bool) -> list[str]:
    """The spec keys resuming `spec` in `run_dir` changes (every one, `RESUMABLE_CHANGES` included; [] when none).

    Raises:
        RunError: the run's state is unreadable or of another backend; or, without `allow_spec_change`, the run's
            ``spec.resolved.yaml`` was edited since it started (its hash is no longer ``spec.sha256``'s), or the
            changes go beyond `RESUMABLE_CHANGES`.
    """
    trained_by = run_dir.read_state().get("backend")  # a state ctu wrote, or a clear error
    if trained_by is not None and trained_by != spec.backend.type:
        raise RunError(f"the run in {run_dir.path} was trained by the {trained_by} backend and the spec names "
                       f"{spec.backend.type}: a run resumes on the backend that wrote its checkpoints")
    original = load_spec(run_dir.spec_file).spec
    recorded = run_dir.path / "spec.sha256"  # the file as written, not as this version's schema fills it in
    edited = recorded.exists() and recorded.read_text(encoding="utf-8").strip() != data_hash(
        yaml.safe_load(run_dir.spec_file.read_text(encoding="utf-8")))
    changes = spec_changes(original.model_dump(mode="json"), spec.model_dump(mode="json"))
    if allow_spec_change:
        return changes + (["spec.resolved.yaml"] if edited else [])
    if edited:
        raise RunError(f"{run_dir.spec_file} was changed after the run started (its hash is not the one in {recorded}): "
                       "resuming it would train another experiment. Restore it, or resume with --allow-spec-change "
                       "(recorded in the run)")
    if beyond := [key for key in changes if not key.startswith(RESUMABLE_CHANGES)]:
        raise RunError(f"the overrides change what the run in {run_dir.path} trains ({', '.join(beyond)}); a resume may "
                       f"change only {', '.join(RESUMABLE_CHANGES)}. Start a new run, or resume with "
                       "--allow-spec-change (recorded in the run)")
    return []


def _record_spec_change(run_dir: RunDir, spec: Spec, changes: list[str]) -> None:
    """Append to ``spec_changes.jsonl`` what an `--allow-spec-change` resume changed: the keys (with
    ``spec.resolved.yaml`` when that file was edited), the hashes."""
    import json
    import time

    recorded = run_dir.path / "spec.sha256"
    line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changes,
            "started_sha256": recorded.read_text(encoding="utf-8").strip() if recorded.exists() else None,
            "resumed_sha256": spec_hash(spec)}
    from ctu.jsonl import appending

    with appending(run_dir.path / "spec_changes.jsonl") as file:
        file.write(json.dumps(line) + "\n")


def build_builtin_model(model: str, console: Console, progress: bool = True) -> None:
    """Build a ``builtin:`` model that is not cached yet, saying so first and showing the build's progress (a
    rich bar, or a line per phase without `progress`); nothing for other models or a cached build."""
    from ctu.models.builtin import builtin_model, is_builtin, resolve

    if not is_builtin(model) or builtin_model(model).is_built():
        return
    console.print(f"building {model}: first run only, about {builtin_model(model).build_minutes} min on 2 cores (cached afterwards)")
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
