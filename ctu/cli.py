"""The `ctu` command line: thin wrappers over the library, printed with rich.

Exit codes: 0 success; 1 a failed check (`docs --check`) or an environment problem (a broken plugin);
2 a bad spec or bad arguments (a run directory that cannot be run or resumed as asked included). No traceback reaches the user for a bad spec. Importing this module imports
no torch, ray or skyrl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="ctu",
    help="Train tool-using LLM agents with GRPO on tau-bench domains, from one checked YAML spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_SPEC_ERROR = 2
"""Exit code for a bad spec or bad arguments."""
EXIT_NOTHING_MEASURED = 3
"""Exit code of a command that ran but measured or kept nothing (`ctu.errors.NothingMeasuredError`): every episode an
infrastructure error, no conversation kept."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, as shells report it)."""
PATH_ERRORS = (PermissionError, NotADirectoryError, FileExistsError, IsADirectoryError, FileNotFoundError)
"""Errors of a path the user gave (a folder below a file, one without write permission, a missing file): bad input."""


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an unexpected error instead of writing it to a file.")] = False) -> None:
    """Train tool-using LLM agents with GRPO on tau-bench domains, from one checked YAML spec."""


def _split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Spec paths and `key=value` overrides, from one list of positional arguments."""
    specs: list[str] = []
    overrides: list[str] = []
    for arg in args:
        (overrides if "=" in arg and not Path(arg).exists() else specs).append(arg)
    return specs, overrides


def _print_issues(title: str, issues: list, style: str) -> None:
    err.print(f"[{style}]{escape(title)}[/{style}]")
    for issue in issues:
        where = f"  [dim]{escape(str(issue.location))}[/dim]" if issue.location else ""
        err.print(f"  [bold]{escape(issue.path or '<spec>')}[/bold]: {escape(issue.message)}{where}")


def _fail(error: Exception, *bad_input: type[Exception]) -> typer.Exit:
    """Print a ctu error without a traceback; the exit to raise for it: 2 for a bad spec, a run directory that
    cannot be used, or an error of the command's own `bad_input` types; 3 for nothing measured or kept; else 1."""
    from ctu.runners.rundir import RunError
    from ctu.spec.errors import SpecError

    if isinstance(error, SpecError):
        _print_issues(str(error).splitlines()[0], error.issues, "red")
        return typer.Exit(EXIT_SPEC_ERROR)
    from ctu.errors import NothingMeasuredError

    err.print(f"[red]error:[/red] {escape(str(error))}")
    if isinstance(error, NothingMeasuredError):
        return typer.Exit(EXIT_NOTHING_MEASURED)
    return typer.Exit(EXIT_SPEC_ERROR if isinstance(error, (RunError, *bad_input)) else 1)


def _load(path: str, overrides: list[str]):
    from ctu.errors import CtuError
    from ctu.spec import load_spec

    try:
        loaded = load_spec(path, overrides)
    except CtuError as error:
        raise _fail(error) from None
    if loaded.warnings:
        _print_issues(f"{path}: {len(loaded.warnings)} warning(s)", loaded.warnings, "yellow")
    return loaded


def _load_one(args: list[str]):
    """`_load` of the one spec file among `args` (the rest are `key=value` overrides); exit 2 unless there is one."""
    specs, overrides = _split_args(args)
    if len(specs) != 1:
        err.print("[red]error:[/red] name one spec file")
        raise typer.Exit(EXIT_SPEC_ERROR)
    return _load(specs[0], overrides)


IMPORT_HELP = "A Python file or module registering components of your own (repeatable), as a spec's `imports:`."
Imports = Annotated[list[str] | None, typer.Option("--import", "-i", help=IMPORT_HELP)]


def _import_code(entries: list[str] | None) -> None:
    """Import `--import` entries (files relative to the current directory); exit 2 listing every failure."""
    from ctu.spec import import_spec_code

    issues = import_spec_code([str(entry) for entry in entries or []])
    if issues:
        _print_issues("--import failed", [issue.__class__(f"--import {issue.path.split('.')[1]}", issue.message)
                                          for issue in issues], "red")
        raise typer.Exit(EXIT_SPEC_ERROR)


@app.command()
def validate(
    args: Annotated[list[str], typer.Argument(help="Spec files, then optional key=value overrides applied to each.")],
    deep: Annotated[bool, typer.Option("--deep", help="Also run the backend's own checks: for skyrl, resolve the spec into SkyRL's config and run SkyRL's validation (imports skyrl), and warn about GPU packages missing here.")] = False,
) -> None:
    """Check specs without a GPU: schema, component params, cross-field rules, and the gold actions of every task
    file a spec names (replayed once per file version, then cached). Exit 2 listing every problem."""
    from ctu.errors import CtuError
    from ctu.spec import load_spec

    specs, overrides = _split_args(args)
    if not specs:
        err.print("[red]error:[/red] name at least one spec file")
        raise typer.Exit(EXIT_SPEC_ERROR)
    failed = 0
    for path in specs:
        try:
            loaded = load_spec(path, overrides)
        except CtuError as error:
            failed += 1
            code = _fail(error).exit_code
            if code != EXIT_SPEC_ERROR:
                raise typer.Exit(code) from None
            continue
        if loaded.warnings:
            _print_issues(f"{path}: {len(loaded.warnings)} warning(s)", loaded.warnings, "yellow")
        from ctu.tasks.check import spec_task_file_issues

        task_errors, task_warnings = spec_task_file_issues(loaded.spec)  # the gold actions of its task files, replayed
        if task_warnings:
            _print_issues(f"{path}: {len(task_warnings)} task file warning(s)", task_warnings, "yellow")
        if task_errors:
            failed += 1
            _print_issues(f"{path}: {len(task_errors)} task file(s) holding tasks no policy can solve", task_errors, "red")
            continue
        if deep:
            from ctu.runners.backend import backend_of
            from ctu.runners.rundir import RunDir

            spec = loaded.spec
            errors, warnings = backend_of(spec).deep_check(spec, RunDir.of(spec).path)
            for message in warnings:
                err.print(f"[yellow]warning[/yellow] {escape(path)}: {escape(message)}")
            if errors:
                failed += 1
                for message in errors:
                    err.print(f"[red]{escape(path)}:[/red] {escape(message)}")
                continue
        out.print(f"[green]ok[/green] {escape(path)}")
    if failed:
        err.print(f"[red]{failed} of {len(specs)} spec(s) invalid[/red]")
        raise typer.Exit(EXIT_SPEC_ERROR)


@app.command()
def explain(
    spec: Annotated[str, typer.Argument(help="Spec file.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    backend_config: Annotated[bool, typer.Option("--backend-config", "--skyrl", help="Print the config the spec's backend resolves it into instead (skyrl: SkyRL's config; imports skyrl).")] = False,
) -> None:
    """Print the fully resolved spec (extends merged, overrides applied, defaults filled in) as YAML, then its
    schedule as a YAML comment: steps per epoch, GRPO steps, optimizer steps and warm-up."""
    from ctu.spec import dump_spec
    from ctu.spec.schedule import schedule

    loaded = _load(spec, overrides or [])
    if not backend_config:
        typer.echo(dump_spec(loaded.spec), nl=False)
        plan = schedule(loaded.spec)
        typer.echo(f"# schedule: {plan.describe() if plan else 'unknown (a training domain whose tasks ctu counts only by loading it)'}")
        return
    from ctu.errors import CtuError
    from ctu.runners.backend import backend_of
    from ctu.runners.rundir import RunDir

    try:
        resolved = loaded.spec
        launch = backend_of(resolved).plan(resolved, RunDir.of(resolved))
    except CtuError as error:
        raise _fail(error) from None
    typer.echo(launch.config, nl=False)


@app.command()
def run(
    args: Annotated[list[str] | None, typer.Argument(help="The spec file, then key=value overrides.")] = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="Run the spec at smoke scale on CPU (tiny model, local Tinker, scripted user, rule judge, 2 steps).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved config and the launch plan; run nothing.")] = False,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue the run in this run directory from its last checkpoint.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start afresh in an existing run directory, deleting its results.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show ctu's progress bars (a library's never shows).")] = True,
    allow_spec_change: Annotated[bool, typer.Option("--allow-spec-change", help="With --resume: let overrides (or an edited spec.resolved.yaml) change what the run trains; recorded in the run's spec_changes.jsonl.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show SkyRL's and the libraries' logs live too (they always go to the run directory's logs/).")] = False,
) -> None:
    """Train: the spec's backend `skyrl` on a GPU cluster, or `tinker` (locally on CPU with `local: true`)."""
    from ctu.errors import CtuError
    from ctu.runners.launch import launch

    specs, overrides = _split_args(args or [])
    if len(specs) > 1 or (not specs and resume is None):
        err.print("[red]error:[/red] name one spec file (or --resume RUN_DIR)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    try:
        launch(specs[0] if specs else None, overrides, smoke=smoke, dry_run=dry_run, resume=resume,
               overwrite=overwrite, progress=progress, verbose=verbose, allow_spec_change=allow_spec_change, console=out)
    except CtuError as error:
        raise _fail(error) from None


@app.command("eval")
def eval_(
    args: Annotated[list[str] | None, typer.Argument(help="The spec file (default with --run-dir: the run's spec), then key=value overrides.")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Evaluate the model behind this OpenAI-compatible URL (e.g. http://127.0.0.1:8000/v1).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="With --endpoint: the model name it serves.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="With --endpoint: the environment variable holding its API key.")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="Evaluate this Tinker checkpoint (tinker://...) of the spec's model.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Evaluate a run directory's policy: its Hugging Face export (either backend), else a Tinker run's checkpoint (its newest unless --step).")] = None,
    step: Annotated[int | None, typer.Option("--step", min=0, help="With --run-dir: the step whose checkpoint or export to evaluate.")] = None,
    test_set: Annotated[str | None, typer.Option("--test-set", help="Only this test set of the spec.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="The first N tasks of each test set.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Run the evaluation N times, each with seeds of its own: success and pass^k with their mean, standard deviation and 95% interval over the repeats.")] = 1,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Episodes in flight at once.")] = 32,
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
    from ctu.runners.rundir import RunDir

    specs, overrides = _split_args(args or [])
    if len(specs) > 1 or (not specs and run_dir is None):
        err.print("[red]error:[/red] name one spec file (or --run-dir RUN_DIR)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    if submission is not None and not (organization and email):
        err.print("[red]error:[/red] --submission needs --organization and --email (tau2's submission requires both)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    spec_path = specs[0] if specs else str(Path(run_dir or ".") / "spec.resolved.yaml")
    loaded = _load(spec_path, overrides)
    spec = loaded.spec
    choice = PolicyChoice(endpoint=endpoint, model=model, api_key_env=api_key_env, checkpoint=checkpoint,
                          run_dir=run_dir, step=step)
    from ctu.runners.console import silence_progress_bars

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
        from ctu.evaluation.runner import TRAJECTORIES, read_lines

        if folder is None:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        kept = [line for line in read_lines(folder / TRAJECTORIES).values() if line.get("infra_error") is None]
        err.print(f"[yellow]interrupted:[/yellow] {len(kept)} finished episode(s) kept in "
                  f"{escape(str(folder / TRAJECTORIES))}; the same command continues from there")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except CtuError as error:  # EvalError: bad arguments (no such test set or checkpoint, another evaluation in --out)
        raise _fail(error, EvalError) from None
    out.print(report_table(result.report))
    out.print(f"{result.ran} episode(s) run; results in {escape(str(result.out_dir))} (eval.json, trajectories.jsonl, eval.png)")
    if submission is not None:
        from ctu.evaluation.submission import leaderboard_submission

        assert organization is not None and email is not None
        try:
            data, notes = leaderboard_submission(result.report, spec, model_name=model_name or choice.label(),
                                                 organization=organization, email=email)
        except ValueError as error:
            err.print(f"[red]error:[/red] no submission written: {escape(str(error))}")
            raise typer.Exit(EXIT_SPEC_ERROR) from None
        submission.parent.mkdir(parents=True, exist_ok=True)
        submission.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        out.print(f"wrote the tau2 leaderboard submission {escape(str(submission))}")
        for note in notes:
            err.print(f"[yellow]leaderboard:[/yellow] {escape(note)}")
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


def _regrade(folder: Path, tasks_file: Path) -> None:
    """`ctu eval --regrade`: re-score `folder`'s episodes against `tasks_file`, print what changed and the table."""
    from ctu.evaluation.policies import EvalError
    from ctu.evaluation.regrade import regrade
    from ctu.evaluation.report import report_table

    try:
        done = regrade(folder, tasks_file)
    except EvalError as error:
        raise _fail(error, EvalError) from None
    before, after = done.before.get("success_rate"), done.report["overall"].get("success_rate")
    out.print(report_table(done.report))
    out.print(f"{done.rescored} episode(s) re-scored against {escape(str(tasks_file))}: {done.became_success} became "
              f"successes, {done.became_failure} failures; success {'-' if before is None else f'{before:.3f}'} -> "
              f"{'-' if after is None else f'{after:.3f}'}; {done.unchanged_tasks_missing} whose task the file lacks and "
              f"{done.skipped} infrastructure error(s) kept as they were; results in {escape(str(done.out_dir))}")


@app.command()
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


@app.command()
def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to this file instead of stdout.")] = None,
    imports: Imports = None,
) -> None:
    """Print the spec's JSON Schema, with every registered component's params (for yaml-language-server)."""
    from ctu.errors import CtuError
    from ctu.spec.reference import render_json_schema

    _import_code(imports)
    try:
        text = json.dumps(render_json_schema(), indent=2) + "\n"
    except CtuError as error:
        raise _fail(error) from None
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        out.print(f"wrote {escape(str(output))}")


@app.command()
def docs(
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if the file is stale instead of writing it.")] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="The reference file.")] = Path("SPEC_REFERENCE.md"),
    imports: Imports = None,
) -> None:
    """Regenerate SPEC_REFERENCE.md from the schema and the registry (with `--import`, your components too)."""
    from ctu.errors import CtuError
    from ctu.spec.reference import render_reference

    _import_code(imports)
    try:
        text = render_reference()
    except CtuError as error:
        raise _fail(error) from None
    current = output.read_text(encoding="utf-8") if output.exists() else None
    if check:
        if current != text:
            err.print(f"[red]{escape(str(output))} is stale[/red]: run `ctu docs` and commit the result")
            raise typer.Exit(1)
        out.print(f"[green]ok[/green] {escape(str(output))} is up to date")
        return
    output.write_text(text, encoding="utf-8")
    out.print(f"wrote {escape(str(output))}")


@app.command()
def components(
    kind: Annotated[str | None, typer.Argument(help="Only this kind (e.g. parsers).")] = None,
    spec: Annotated[str | None, typer.Option("--spec", help="Also list the components a spec's `imports:` register.")] = None,
    imports: Imports = None,
) -> None:
    """List the registered components, by kind, with a one-line description and where each is defined."""
    from rich.table import Table

    from ctu.errors import CtuError
    from ctu.registry import KINDS, registry

    _import_code(imports)
    if spec is not None:
        _load(spec, [])
    try:
        kinds = [registry[kind].kind] if kind else list(KINDS)
    except CtuError as error:
        raise _fail(error) from None
    table = Table(show_header=True, header_style="bold")
    table.add_column("kind")
    table.add_column("name")
    table.add_column("description")
    user_code = imports or spec
    if user_code:
        table.add_column("defined at")
    for name in kinds:
        for info in registry[name]:
            table.add_row(name, info.name, info.description, *([_short_origin(info.origin)] if user_code else []))
    out.print(table)


def _short_origin(origin: str) -> str:
    """`origin` relative to the current directory when under it; ctu's own components as ``ctu``."""
    import ctu

    package = str(Path(ctu.__file__).parent)
    if origin.startswith(package):
        return "ctu"
    cwd = str(Path.cwd()) + "/"
    return origin[len(cwd):] if origin.startswith(cwd) else origin


data_app = typer.Typer(help="Prepare tau-bench datasets: task rows for RL, conversations for SFT.", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@data_app.command("prepare")
def data_prepare(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the parquet files.")],
    domains: Annotated[str, typer.Option("--domains", help="Comma-separated domains.")] = "retail,airline,telecom",
    splits: Annotated[str, typer.Option("--splits", help="Comma-separated splits.")] = "train,test",
    max_tasks_per_domain: Annotated[
        int | None, typer.Option("--max-tasks-per-domain", min=1, help="Keep the first N tasks of each file.")
    ] = None,
    imports: Imports = None,
) -> None:
    """Write SkyRL-format parquet files, one per domain and split, plus a combined train.parquet."""
    from ctu.errors import CtuError

    _import_code(imports)
    from ctu.components.domains import build_domain
    from tau_bench_env.data import prepare_datasets

    try:
        built = [build_domain(name, {}) for name in _csv(domains)]
        written = prepare_datasets(built, _csv(splits), out_dir, max_tasks_per_domain)
    except (CtuError, ValueError) as error:
        err.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_SPEC_ERROR) from None
    for path in written:
        out.print(f"wrote {escape(str(path))}")


@data_app.command("sft")
def data_sft(
    args: Annotated[list[str], typer.Argument(help="The spec file, then key=value overrides.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: train.parquet (SkyRL's SFT format), sft_report.json.")],
    gold: Annotated[bool, typer.Option("--gold/--no-gold", help="Gold replays of the spec's training tasks, played with its user simulator.")] = True,
    from_eval: Annotated[list[Path] | None, typer.Option("--from-eval", help="Rejection sampling: a `ctu eval` or `ctu tasks calibrate` episodes folder (repeatable).")] = None,
    min_reward: Annotated[float, typer.Option("--min-reward", min=0.0, max=1.0, help="Keep conversations tau2 scores at least this.")] = 1.0,
    max_per_task: Annotated[int, typer.Option("--max-per-task", min=1, help="Rejection sampling: at most N conversations per task.")] = 4,
    tokens: Annotated[bool, typer.Option("--tokens/--no-tokens", help="Count the rows' tokens with the spec's tokenizer.")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar over the gold replays.")] = True,
) -> None:
    """Write conversations to fine-tune on before GRPO, in SkyRL's SFT format (messages, tools): gold replays of the
    spec's training tasks and/or a teacher's successful episodes. A validation or test task is an error."""
    from ctu.errors import CtuError
    from ctu.sft.data import SFTDataError, build_sft_data

    spec = _load_one(args).spec
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("gold replays"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                   disable=not progress, transient=True)
    job = bar.add_task("gold", total=None)

    def on_task(total: int) -> None:
        bar.update(job, total=total) if total else bar.advance(job)

    try:
        with bar:
            data = build_sft_data(spec, out_dir, gold=gold, from_eval=from_eval, min_reward=min_reward,
                                  max_per_task=max_per_task, tokens=tokens, on_task=on_task)
    except CtuError as error:
        raise _fail(error, SFTDataError) from None
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/yellow] nothing written to {escape(str(out_dir))} (the SFT data is written whole "
                  "at the end, so an earlier train.parquet there is as it was); the same command starts again")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    report = data.report()
    rejected = ", ".join(f"{reason} {n}" for reason, n in report["rejected"].items()) or "none"
    shown = f"; {report['tokens']} tokens" if report["tokens"] is not None else ""
    out.print(f"{report['rows']} conversation(s) of {report['tasks']} task(s) kept{shown}; rejected: {rejected}")
    out.print(f"wrote {escape(str(out_dir))}/train.parquet, sft_report.json")


tasks_app = typer.Typer(help="Check, generate and calibrate task sets in tau2's format.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


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

    _import_code(imports)
    try:
        report = check_task_file(domain, tasks_file, split_file, split, max_turns, max_errors)
    except CtuError as error:  # a file that is no task set (TaskFileError), an unknown domain: bad input
        raise _fail(error, CtuError) from None
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

    spec = _load_one(args).spec
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
            failed = _fail(error, GenerationError, TemplateError)
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
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Calibrate the model behind this OpenAI-compatible URL.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="With --endpoint: the model name it serves.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="With --endpoint: the environment variable holding its API key.")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="A Tinker checkpoint (tinker://...) of the spec's model.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="A run directory's policy (as `ctu eval --run-dir`).")] = None,
    step: Annotated[int | None, typer.Option("--step", min=0, help="With --run-dir: the step.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="The first N tasks of the source.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Episodes in flight at once.")] = 32,
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

    spec = _load_one(args).spec
    choice = PolicyChoice(endpoint=endpoint, model=model, api_key_env=api_key_env, checkpoint=checkpoint,
                          run_dir=run_dir, step=step)
    silence_progress_bars()
    try:
        result = calibrate_tasks(spec, choice, out_dir, source=source, samples=samples, limit=limit,
                                 concurrency=concurrency, overwrite=overwrite, progress=progress)
    except CtuError as error:
        raise _fail(error, EvalError) from None
    counts = ", ".join(f"{name} {n}" for name, n in result.counts().items())
    out.print(f"{len(result.tasks)} task(s) calibrated ({result.ran} episode(s) run); buckets: {counts}")
    out.print(f"wrote {escape(str(out_dir))}/calibration.json, tasks.json, split_tasks.json")


def main() -> None:
    """Console-script entry point: `app`, where an error no command handled is still a message, never a traceback
    (unless ``--debug``): a path the user gave that cannot be used exits 2 naming it; anything else exits 1, its
    traceback written to a file the message names."""
    import sys

    try:
        app()
    except PATH_ERRORS as error:
        if "--debug" in sys.argv[1:]:
            raise
        where = f" {error.filename}" if error.filename else ""
        err.print(f"[red]error:[/red] cannot use{escape(where)}: {escape(error.strerror or str(error))}")
        sys.exit(EXIT_SPEC_ERROR)
    except Exception as error:
        if "--debug" in sys.argv[1:]:
            raise
        lines = str(error).strip().splitlines() or [""]  # a remote error (Ray's) holds its whole traceback: its last line
        err.print(f"[red]error:[/red] {escape(type(error).__name__)}: {escape(lines[-1])}\n"
                  f"the traceback is in {escape(_write_traceback())}; `ctu --debug ...` prints it instead")
        sys.exit(1)


def _write_traceback() -> str:
    """Write the exception being handled's traceback to a new file in the temporary folder; its path."""
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix="ctu-error-", suffix=".log", delete=False, encoding="utf-8") as file:
        traceback.print_exc(file=file)
    return file.name


if __name__ == "__main__":
    main()
