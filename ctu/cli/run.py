"""`ctu run`: train from a spec (or resume a run directory) on the spec's backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctu.cli.common import EXIT_SPEC_ERROR, err, fail, out, split_args


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

    specs, overrides = split_args(args or [])
    if len(specs) > 1 or (not specs and resume is None):
        err.print("[red]error:[/red] name one spec file (or --resume RUN_DIR)")
        raise typer.Exit(EXIT_SPEC_ERROR)
    try:
        launch(specs[0] if specs else None, overrides, smoke=smoke, dry_run=dry_run, resume=resume,
               overwrite=overwrite, progress=progress, verbose=verbose, allow_spec_change=allow_spec_change, console=out)
    except CtuError as error:
        raise fail(error) from None


