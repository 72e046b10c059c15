"""`ctu tasks check`, `generate` and `calibrate`: task sets in tau2's format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ctu.cli.common import (
    EXIT_INTERRUPTED,
    Checkpoint,
    Concurrency,
    Endpoint,
    EndpointKeyEnv,
    EndpointModel,
    Imports,
    RunDirPolicy,
    Step,
    err,
    fail,
    import_code,
    load_one,
    out,
)

tasks_app = typer.Typer(help="Check, generate and calibrate task sets in tau2's format.", no_args_is_help=True)


@tasks_app.command("check")
def tasks_check(
    tasks_file: Annotated[Path, typer.Argument(help="A tasks file in tau2's format (tasks.json).")],
    domain: Annotated[str, typer.Option("--domain", help="The registered domain the tasks are of (e.g. retail).")],
    split_file: Annotated[Path | None, typer.Option("--split-file", help="Its split file (split_tasks.json).")] = None,
    split: Annotated[str, typer.Option("--split", help="The split to check (base: every task).")] = "base",
    max_turns: Annotated[int, typer.Option("--max-turns", min=1, help="Policy turns an episode allows (environment.max_turns).")] = 20,
    max_errors: Annotated[int, typer.Option("--max-errors", min=1, help="Errors an episode allows (environment.max_errors).")] = 10,
    imports: Imports = None,
) -> None:
    """Replay every task's gold actions from its initial state, as tau2 would: exit 1 listing each task whose gold
    actions fail, write nothing, do not score 1.0 or do not fit the limits; exit 2 for a file that is no task set."""
    from ctu.errors import CtuError
    from ctu.tasks.check import check_task_file

    import_code(imports)
    try:
        report = check_task_file(domain, tasks_file, split_file, split, max_turns, max_errors)
    except CtuError as error:  # a file that is no task set (TaskFileError), an unknown domain: bad input
        raise fail(error, CtuError) from None
    for fault in report.faults:
        out.print(f"task {escape(fault.task_id)}: {escape(fault.reason)}")
    failed = len(report.failed_ids)
    out.print(f"{report.checked - failed} of {report.checked} task(s) sound"
              + (f"; {failed} failed: {escape(', '.join(report.failed_ids))}" if failed else ""))
    if failed:
        raise typer.Exit(1)


@tasks_app.command("generate")
def tasks_generate(
    args: Annotated[list[str], typer.Argument(help="The spec file (with a task_generation section), then key=value overrides.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: tasks.json, split_tasks.json, provenance.json.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start afresh instead of continuing the generation in --out.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Propose training tasks with the spec's task generator, keep those that pass verification (gold actions
    replayed, scored 1.0 by tau2, no duplicate, no overlap with a test task) and write them in tau2's format.
    A killed generation keeps what it verified: the same command continues."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ctu.components.task_generators.template import TemplateError
    from ctu.errors import CtuError
    from ctu.tasks.generate import GenerationError, generate_tasks

    spec = load_one(args).spec
    count = spec.task_generation.count if spec.task_generation is not None else 0
    bar = Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rejected]} rejected"),
                   TimeElapsedColumn(), console=err, disable=not progress, transient=True)
    with bar:
        job = bar.add_task("tasks", total=count, rejected=0)
        try:
            result = generate_tasks(spec, out_dir, overwrite=overwrite,
                                    on_decision=lambda kept, proposed, _: bar.update(job, completed=kept, rejected=proposed - kept))
        except KeyboardInterrupt:
            err.print(f"[yellow]interrupted:[/yellow] every task verified so far is kept in "
                      f"{escape(str(out_dir / 'proposals.jsonl'))}; the same command continues from there")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except CtuError as error:
            failed = fail(error, GenerationError, TemplateError)
            if (out_dir / "proposals.jsonl").exists():
                err.print(f"every task verified so far is kept in {escape(str(out_dir / 'proposals.jsonl'))}; "
                          "the same command continues from there")
            raise failed from None
    rejected = ", ".join(f"{reason} {n}" for reason, n in result.rejected.most_common()) or "none"
    out.print(f"{result.kept} task(s) kept of {result.proposed} proposed; rejected: {rejected}")
    out.print(f"wrote {escape(str(out_dir))}/tasks.json, split_tasks.json, provenance.json "
              f"({result.new} proposal(s) decided in {result.seconds:.1f} s)")
    if result.kept < count:
        err.print(f"[yellow]only {result.kept} of {count} task(s) kept[/yellow] before max_proposals: "
                  "see the reasons in proposals.jsonl")
        raise typer.Exit(1)


@tasks_app.command("calibrate")
def tasks_calibrate(
    args: Annotated[list[str], typer.Argument(help="The spec file, then key=value overrides.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: calibration.json, tasks.json, split_tasks.json.")],
    samples: Annotated[int, typer.Option("--samples", "-k", min=1, help="Episodes per task.")] = 4,
    source: Annotated[int, typer.Option("--source", min=0, help="Which training source (data.train.N) to calibrate.")] = 0,
    endpoint: Endpoint = None,
    model: EndpointModel = None,
    api_key_env: EndpointKeyEnv = None,
    checkpoint: Checkpoint = None,
    run_dir: RunDirPolicy = None,
    step: Step = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="The first N tasks of the source.")] = None,
    concurrency: Concurrency = 32,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start afresh instead of resuming in --out.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show ctu's progress bar.")] = True,
) -> None:
    """Play each training task --samples times with a policy (as `ctu eval` picks one; default: the spec's own
    model) at the training temperature, record its pass rate and write difficulty buckets (unsolved, hard,
    medium, easy) as splits of a task set in tau2's format: train on `split: [medium, hard]`."""
    from ctu.errors import CtuError
    from ctu.evaluation.policies import EvalError, PolicyChoice
    from ctu.runners.console import silence_progress_bars
    from ctu.tasks.calibrate import calibrate_tasks

    spec = load_one(args).spec
    choice = PolicyChoice(endpoint=endpoint, model=model, api_key_env=api_key_env, checkpoint=checkpoint,
                          run_dir=run_dir, step=step)
    silence_progress_bars()
    try:
        result = calibrate_tasks(spec, choice, out_dir, source=source, samples=samples, limit=limit,
                                 concurrency=concurrency, overwrite=overwrite, progress=progress)
    except CtuError as error:
        raise fail(error, EvalError) from None
    counts = ", ".join(f"{name} {n}" for name, n in result.counts().items())
    out.print(f"{len(result.tasks)} task(s) calibrated ({result.ran} episode(s) run); buckets: {counts}")
    out.print(f"wrote {escape(str(out_dir))}/calibration.json, tasks.json, split_tasks.json")


