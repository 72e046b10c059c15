"""What every `ctu` command shares: the consoles, the exit codes, reading a spec from the command line, and
printing a ctu error as a message (never a traceback)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO, cast

import typer
from rich.console import Console
from rich.markup import escape

from ctu.redaction import ScrubbedStream

if TYPE_CHECKING:
    from ctu.spec import LoadedSpec

# every line a command prints is scrubbed of the secrets its specs name (`ctu.redaction`)
out = Console(file=cast("TextIO", ScrubbedStream(lambda: sys.stdout)), highlight=False, soft_wrap=True)
err = Console(file=cast("TextIO", ScrubbedStream(lambda: sys.stderr)), highlight=False, soft_wrap=True)

EXIT_SPEC_ERROR = 2
"""Exit code for a bad spec or bad arguments."""
EXIT_NOTHING_MEASURED = 3
"""Exit code of a command that ran but measured or kept nothing (`ctu.errors.NothingMeasuredError`): every episode an
infrastructure error, no conversation kept."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, as shells report it)."""
PATH_ERRORS = (PermissionError, NotADirectoryError, FileExistsError, IsADirectoryError, FileNotFoundError)
"""Errors of a path the user gave (a folder below a file, one without write permission, a missing file): bad input."""


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Spec paths and `key=value` overrides, from one list of positional arguments."""
    specs: list[str] = []
    overrides: list[str] = []
    for arg in args:
        (overrides if "=" in arg and not Path(arg).exists() else specs).append(arg)
    return specs, overrides


def print_issues(title: str, issues: list, style: str) -> None:
    """Print `title`, then each issue with its dotted path and where it came from, to stderr in `style`."""
    err.print(f"[{style}]{escape(title)}[/{style}]")
    for issue in issues:
        where = f"  [dim]{escape(str(issue.location))}[/dim]" if issue.location else ""
        err.print(f"  [bold]{escape(issue.path or '<spec>')}[/bold]: {escape(issue.message)}{where}")


def fail(error: Exception, *bad_input: type[Exception]) -> typer.Exit:
    """Print a ctu error without a traceback; the exit to raise for it: 2 for a bad spec, a run directory that
    cannot be used, or an error of the command's own `bad_input` types; 3 for nothing measured or kept; else 1."""
    from ctu.runners.rundir import RunError
    from ctu.spec.errors import SpecError

    if isinstance(error, SpecError):
        print_issues(str(error).splitlines()[0], error.issues, "red")
        return typer.Exit(EXIT_SPEC_ERROR)
    from ctu.errors import NothingMeasuredError

    err.print(f"[red]error:[/red] {escape(str(error))}")
    if isinstance(error, NothingMeasuredError):
        return typer.Exit(EXIT_NOTHING_MEASURED)
    return typer.Exit(EXIT_SPEC_ERROR if isinstance(error, (RunError, *bad_input)) else 1)


def load(path: str, overrides: list[str]) -> LoadedSpec:
    """The spec at `path` with `overrides`, its warnings printed; exit 2 printing every problem of a bad one."""
    from ctu.errors import CtuError
    from ctu.spec import load_spec

    try:
        loaded = load_spec(path, overrides)
    except CtuError as error:
        raise fail(error) from None
    if loaded.warnings:
        print_issues(f"{path}: {len(loaded.warnings)} warning(s)", loaded.warnings, "yellow")
    return loaded


def load_one(args: list[str]) -> LoadedSpec:
    """`load` of the one spec file among `args` (the rest are `key=value` overrides); exit 2 unless there is one."""
    specs, overrides = split_args(args)
    if len(specs) != 1:
        err.print("[red]error:[/red] name one spec file")
        raise typer.Exit(EXIT_SPEC_ERROR)
    return load(specs[0], overrides)


IMPORT_HELP = "A Python file or module registering components of your own (repeatable), as a spec's `imports:`."
Imports = Annotated[list[str] | None, typer.Option("--import", "-i", help=IMPORT_HELP)]


def import_code(entries: list[str] | None) -> None:
    """Import `--import` entries (files relative to the current directory); exit 2 listing every failure."""
    from ctu.spec import import_spec_code

    issues = import_spec_code([str(entry) for entry in entries or []])
    if issues:
        print_issues("--import failed", [issue.__class__(f"--import {issue.path.split('.')[1]}", issue.message)
                                          for issue in issues], "red")
        raise typer.Exit(EXIT_SPEC_ERROR)




# The policy a command plays (`ctu eval`, `ctu tasks calibrate`), as `ctu.evaluation.policies.PolicyChoice` takes it:
# the spec's own model unless one of these names another.
Endpoint = Annotated[str | None, typer.Option("--endpoint", help="The model behind this OpenAI-compatible URL (e.g. http://127.0.0.1:8000/v1).")]
EndpointModel = Annotated[str | None, typer.Option("--model", help="With --endpoint: the model name it serves.")]
EndpointKeyEnv = Annotated[str | None, typer.Option("--api-key-env", help="With --endpoint: the environment variable holding its API key.")]
Checkpoint = Annotated[str | None, typer.Option("--checkpoint", help="A Tinker checkpoint (tinker://...) of the spec's model.")]
RunDirPolicy = Annotated[Path | None, typer.Option("--run-dir", help="A run directory's policy: its Hugging Face export (either backend), else a Tinker run's checkpoint (its newest unless --step).")]
Step = Annotated[int | None, typer.Option("--step", min=0, help="With --run-dir: the step whose checkpoint or export to play.")]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1, help="Episodes in flight at once.")]
