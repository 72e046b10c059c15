"""`ctu eval` and `ctu compare`: a policy measured on the spec's test sets as tau2 scores it, and results side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from ctu.evaluation.runner import EvalResult
    from ctu.spec import Spec

from ctu.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NOTHING_MEASURED,
    EXIT_SPEC_ERROR,
    Checkpoint,
    Concurrency,
    Endpoint,
    EndpointKeyEnv,
    EndpointModel,
    RunDirPolicy,
    Step,
    err,
    fail,
    load,
    out,
    split_args,
)


def eval_(
    args: Annotated[list[str] | None, typer.Argument(help="The spec file (default with --run-dir: the run's spec), then key=value overrides.")] = None,
    endpoint: Endpoint = None,
    model: EndpointModel = None,
    api_key_env: EndpointKeyEnv = None,
    checkpoint: Checkpoint = None,
    run_dir: RunDirPolicy = None,
    step: Step = None,
    test_set: Annotated[str | None, typer.Option("--test-set", help="Only this test set of the spec.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="The first N tasks of each test set.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Run the evaluation N times, each with seeds of its own: success and pass^k with their mean, standard deviation and 95% interval over the repeats.")] = 1,
    concurrency: Concurrency = 32,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output folder (default <output_dir>/<name>/eval/<policy>).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start afresh instead of resuming the evaluation in --out.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show ctu's progress bar (a library's never shows).")] = True,
    submission: Annotated[Path | None, typer.Option("--submission", help="Also write the result as a tau2 leaderboard submission (tau2's own schema) to this file; needs --organization and --email.")] = None,
    model_name: Annotated[str | None, typer.Option("--model-name", help="With --submission: the model's name (default: the policy's label).")] = None,
    organization: Annotated[str | None, typer.Option("--organization", help="With --submission: the organization that made the model.")] = None,
    email: Annotated[str | None, typer.Option("--email", help="With --submission: the contact email.")] = None,
    regrade: Annotated[Path | None, typer.Option("--regrade", help="Run nothing: re-score the evaluation's saved episodes (in --out, or the default folder) against this tau2 tasks file, as tau2's --fresh-tasks does, and say what changed.")] = None,
) -> None:
    """Evaluate a policy on the spec's test sets as tau2 scores it: rewards, success, pass^k, terminations, errors.

    The policy is an OpenAI-compatible endpoint, a Tinker checkpoint or run directory, or (by default) the spec's
    own model served by a local Tinker server. Writes eval.json, trajectories.jsonl and eval.png; a rerun into the
    same folder skips the episodes already there.
    """
    from ctu.errors import CtuError
    from ctu.evaluation.policies import EvalError, PolicyChoice
    from ctu.evaluation.report import report_table
    from ctu.evaluation.runner import run_evaluation
    from ctu.runners.console import silence_progress_bars
    from ctu.runners.rundir import RunDir

    if submission is not None and not (organization and email):
        err.print("[red]error:[/red] --submission needs --organization and --email (tau2's submission requires both)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    spec = _spec_to_evaluate(args or [], run_dir)
    choice = PolicyChoice(endpoint=endpoint, model=model, api_key_env=api_key_env, checkpoint=checkpoint,
                          run_dir=run_dir, step=step)
    silence_progress_bars()  # the libraries' bars; ctu's own follows --progress
    folder = out_dir
    if regrade is not None:
        _regrade(out_dir or RunDir.of(spec).path / "eval" / choice.label(), regrade)
        return
    try:
        choice.check()
        folder = out_dir or RunDir.of(spec).path / "eval" / choice.label()
        result = run_evaluation(spec, choice, folder, test_set=test_set, limit=limit, concurrency=concurrency,
                                overwrite=overwrite, progress=progress, repeats=repeats)
    except KeyboardInterrupt:
        raise _interrupted(folder) from None
    except CtuError as error:  # EvalError: bad arguments (no such test set or checkpoint, another evaluation in --out)
        raise fail(error, EvalError) from None
    out.print(report_table(result.report))
    out.print(f"{result.ran} episode(s) run; results in {escape(str(result.out_dir))} (eval.json, trajectories.jsonl, eval.png)")
    if submission is not None:
        assert organization is not None and email is not None
        _write_submission(result.report, spec, submission, model_name or choice.label(), organization, email)
    _say_what_was_left_out(result, spec)


def _spec_to_evaluate(args: list[str], run_dir: Path | None) -> Spec:
    """The spec file among `args` with the rest as overrides, else the run directory's resolved spec; exit 2
    unless exactly one of them is named."""
    specs, overrides = split_args(args)
    if len(specs) > 1 or (not specs and run_dir is None):
        err.print("[red]error:[/red] name one spec file (or --run-dir RUN_DIR)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    return load(specs[0] if specs else str(Path(run_dir or ".") / "spec.resolved.yaml"), overrides).spec


def _interrupted(folder: Path | None) -> typer.Exit:
    """After Ctrl-C: say what `folder` kept (the finished episodes); the exit to raise."""
    from ctu.evaluation.runner import TRAJECTORIES, read_lines

    if folder is None:
        return typer.Exit(EXIT_INTERRUPTED)
    kept = [line for line in read_lines(folder / TRAJECTORIES).values() if line.get("infra_error") is None]
    err.print(f"[yellow]interrupted:[/yellow] {len(kept)} finished episode(s) kept in "
              f"{escape(str(folder / TRAJECTORIES))}; the same command continues from there")
    return typer.Exit(EXIT_INTERRUPTED)


def _write_submission(report: dict[str, object], spec: Spec, path: Path, model_name: str, organization: str,
                      email: str) -> None:
    """`--submission`: the result as a tau2 leaderboard submission at `path`; exit 2 when tau2's schema refuses it."""
    from ctu.evaluation.submission import leaderboard_submission

    try:
        data, notes = leaderboard_submission(report, spec, model_name=model_name, organization=organization, email=email)
    except ValueError as error:
        err.print(f"[red]error:[/red] no submission written: {escape(str(error))}")
        raise typer.Exit(EXIT_SPEC_ERROR) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    out.print(f"wrote the tau2 leaderboard submission {escape(str(path))}")
    for note in notes:
        err.print(f"[yellow]leaderboard:[/yellow] {escape(note)}")


def _say_what_was_left_out(result: EvalResult, spec: Spec) -> None:
    """Name the episodes left out of the figures (user-simulator faults, infrastructure errors); exit 3 when that
    was every one, or when no episode reached a policy turn (`policy_never_played`): nothing measured."""
    from ctu.evaluation.report import policy_never_played

    overall = result.report["overall"]
    failed = int(overall.get("infra_errors", 0)) if isinstance(overall, dict) else 0
    faulted = int(overall.get("user_faults", 0)) if isinstance(overall, dict) else 0
    excluded = 0 if spec.environment.user_faults.action == "keep" else min(faulted, failed)
    if excluded:
        err.print(f"[yellow]{excluded} episode(s) left out for a user-simulator fault[/yellow] (each named in "
                  "trajectories.jsonl's `user_fault`; success as tau2 scores them is in the table): the same command "
                  "plays them again")
    if failed - excluded:
        err.print(f"[yellow]{failed - excluded} episode(s) ended by an infrastructure error[/yellow] (left out of every "
                  f"figure; tracebacks in {escape(str(result.out_dir / 'eval.log'))}): the same command runs them again")
    episodes = int(overall.get("episodes", 0)) if isinstance(overall, dict) else 0
    if failed >= episodes:
        err.print(f"[red]error:[/red] nothing measured: {'none of the' if episodes else 'no'} {episodes or ''} episode(s) "
                  "finished without an infrastructure error or an excluded user-simulator fault, so eval.json holds no "
                  "success figure; check the endpoint, then run the same command again")
        raise typer.Exit(EXIT_NOTHING_MEASURED)
    if isinstance(overall, dict) and (why := policy_never_played(overall)):
        err.print(f"[red]error:[/red] nothing measured: {escape(why)}")
        raise typer.Exit(EXIT_NOTHING_MEASURED)


def _regrade(folder: Path, tasks_file: Path) -> None:
    """`ctu eval --regrade`: re-score `folder`'s episodes against `tasks_file`, print what changed and the table."""
    from ctu.errors import NothingMeasuredError
    from ctu.evaluation.policies import EvalError
    from ctu.evaluation.regrade import regrade
    from ctu.evaluation.report import report_table

    try:
        done = regrade(folder, tasks_file)
    except (EvalError, NothingMeasuredError) as error:
        raise fail(error, EvalError) from None
    before, after = done.before.get("success_rate"), done.report["overall"].get("success_rate")
    out.print(report_table(done.report))
    out.print(f"{done.rescored} episode(s) re-scored against {escape(str(tasks_file))}: {done.became_success} became "
              f"successes, {done.became_failure} failures; success {'-' if before is None else f'{before:.3f}'} -> "
              f"{'-' if after is None else f'{after:.3f}'}; {done.unchanged_tasks_missing} whose task the file lacks and "
              f"{done.skipped} infrastructure error(s) kept as they were; results in {escape(str(done.out_dir))}")


def compare(
    results: Annotated[list[Path], typer.Argument(help="eval.json files, or the folders holding them.")],
    plot: Annotated[Path | None, typer.Option("--plot", help="Also write a PNG with every evaluation side by side.")] = None,
) -> None:
    """Put several `ctu eval` results side by side (e.g. the base model, checkpoints, an API model), each one's
    success rate against the first's with a paired-bootstrap 95% interval; test sets holding other tasks are flagged."""
    from ctu.evaluation.comparison import label_apart, without_common_test_set
    from ctu.evaluation.report import comparison_table, plot_comparison, read_report

    reports = []
    for path in results:
        try:
            reports.append(read_report(path / "eval.json" if path.is_dir() else path))
        except ValueError as error:
            err.print(f"[red]error:[/red] {escape(str(error))}")
            raise typer.Exit(EXIT_SPEC_ERROR) from None
    if len(results) < 2:
        err.print(f"[red]error:[/red] `ctu compare` needs two or more results (the first is the baseline), got one: "
                  f"{escape(str(results[0]))}; its own figures are its eval.json (the table `ctu eval` printed)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    reports = label_apart(reports, [str(path) for path in results])
    apart = without_common_test_set(reports)
    for index in apart:
        err.print(f"[yellow]{escape(str(reports[index]['policy']))} shares no test set with the baseline "
                  f"{escape(str(reports[0]['policy']))}[/yellow] (its: {', '.join(reports[index]['by_test_set']) or 'none'}; "
                  f"the baseline's: {', '.join(reports[0]['by_test_set']) or 'none'}): nothing of it is compared")
    if len(apart) == len(reports) - 1:
        err.print("[red]error:[/red] no result shares a test set with the baseline: nothing to compare")
        raise typer.Exit(EXIT_SPEC_ERROR)
    out.print(comparison_table(reports))
    if plot is not None:
        plot_comparison(reports, plot)
        out.print(f"wrote {escape(str(plot))}")


