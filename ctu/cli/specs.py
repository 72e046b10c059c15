"""`ctu validate`, `explain`, `schema`, `docs` and `components`: the spec and the registry, without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ctu.cli.common import EXIT_SPEC_ERROR, Imports, err, fail, import_code, load, out, print_issues, split_args


def validate(
    args: Annotated[list[str], typer.Argument(help="Spec files, then optional key=value overrides applied to each.")],
    deep: Annotated[bool, typer.Option("--deep", help="Also run the backend's own checks: for skyrl, resolve the spec into SkyRL's config and run SkyRL's validation (imports skyrl), and warn about GPU packages missing here.")] = False,
) -> None:
    """Check specs without a GPU: schema, component params, cross-field rules, and the gold actions of every task
    file a spec names (replayed once per file version, then cached). Exit 2 listing every problem."""
    from ctu.errors import CtuError
    from ctu.spec import load_spec

    specs, overrides = split_args(args)
    if not specs:
        err.print("[red]error:[/red] name at least one spec file")
        raise typer.Exit(EXIT_SPEC_ERROR)
    failed = 0
    for path in specs:
        try:
            loaded = load_spec(path, overrides)
        except CtuError as error:
            failed += 1
            code = fail(error).exit_code
            if code != EXIT_SPEC_ERROR:
                raise typer.Exit(code) from None
            continue
        if loaded.warnings:
            print_issues(f"{path}: {len(loaded.warnings)} warning(s)", loaded.warnings, "yellow")
        from ctu.tasks.check import spec_task_file_issues

        task_errors, task_warnings = spec_task_file_issues(loaded.spec)  # the gold actions of its task files, replayed
        if task_warnings:
            print_issues(f"{path}: {len(task_warnings)} task file warning(s)", task_warnings, "yellow")
        if task_errors:
            failed += 1
            print_issues(f"{path}: {len(task_errors)} task file(s) holding tasks no policy can solve", task_errors, "red")
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


def explain(
    spec: Annotated[str, typer.Argument(help="Spec file.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    backend_config: Annotated[bool, typer.Option("--backend-config", "--skyrl", help="Print the config the spec's backend resolves it into instead (skyrl: SkyRL's config; imports skyrl).")] = False,
) -> None:
    """Print the fully resolved spec (extends merged, overrides applied, defaults filled in) as YAML, then its
    schedule as a YAML comment: steps per epoch, GRPO steps, optimizer steps and warm-up; and how its backend applies
    settings differently."""
    from ctu.spec import dump_spec
    from ctu.spec.backend_rules import how_applied
    from ctu.spec.schedule import schedule

    loaded = load(spec, overrides or [])
    if not backend_config:
        typer.echo(dump_spec(loaded.spec), nl=False)
        plan = schedule(loaded.spec)
        typer.echo(f"# schedule: {plan.describe() if plan else 'unknown (a training domain whose tasks ctu counts only by loading it)'}")
        for line in how_applied(loaded.spec):
            typer.echo(f"# {loaded.spec.backend.type} backend: {line}")
        return
    from ctu.errors import CtuError
    from ctu.runners.backend import backend_of
    from ctu.runners.rundir import RunDir

    try:
        resolved = loaded.spec
        launch = backend_of(resolved).plan(resolved, RunDir.of(resolved))
    except CtuError as error:
        raise fail(error) from None
    typer.echo(launch.config, nl=False)


def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to this file instead of stdout.")] = None,
    imports: Imports = None,
) -> None:
    """Print the spec's JSON Schema, with every registered component's params (for yaml-language-server)."""
    from ctu.errors import CtuError
    from ctu.spec.reference import render_json_schema

    import_code(imports)
    try:
        text = json.dumps(render_json_schema(), indent=2) + "\n"
    except CtuError as error:
        raise fail(error) from None
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        out.print(f"wrote {escape(str(output))}")


def docs(
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if the file is stale instead of writing it.")] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="The reference file.")] = Path("SPEC_REFERENCE.md"),
    imports: Imports = None,
) -> None:
    """Regenerate SPEC_REFERENCE.md from the schema and the registry (with `--import`, your components too)."""
    from ctu.errors import CtuError
    from ctu.spec.reference import render_reference

    import_code(imports)
    try:
        text = render_reference()
    except CtuError as error:
        raise fail(error) from None
    current = output.read_text(encoding="utf-8") if output.exists() else None
    if check:
        if current != text:
            err.print(f"[red]{escape(str(output))} is stale[/red]: run `ctu docs` and commit the result")
            raise typer.Exit(1)
        out.print(f"[green]ok[/green] {escape(str(output))} is up to date")
        return
    output.write_text(text, encoding="utf-8")
    out.print(f"wrote {escape(str(output))}")


def components(
    kind: Annotated[str | None, typer.Argument(help="Only this kind (e.g. parsers).")] = None,
    spec: Annotated[str | None, typer.Option("--spec", help="Also list the components a spec's `imports:` register.")] = None,
    imports: Imports = None,
) -> None:
    """List the registered components, by kind, with a one-line description and where each is defined."""
    from rich.table import Table

    from ctu.errors import CtuError
    from ctu.registry import KINDS, registry

    import_code(imports)
    if spec is not None:
        load(spec, [])
    try:
        kinds = [registry[kind].kind] if kind else list(KINDS)
    except CtuError as error:
        raise fail(error) from None
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
