"""`ctu view`: a run's or evaluations' episodes in one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ctu.cli.common import fail, out


def view(
    paths: Annotated[list[Path], typer.Argument(help="Run directories or `ctu eval` folders (two or more: the first two evaluations compared).")],
    out_file: Annotated[Path | None, typer.Option("--out", help="The HTML file to write (default: view.html in the first folder).")] = None,
    max_episodes: Annotated[int, typer.Option("--max-episodes", min=1, help="Most episodes the page embeds: every evaluation's first, then training episodes spread over the steps.")] = 3000,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
) -> None:
    """Write every episode of a run or an evaluation (curves by step, each task's pass rate per evaluation, the
    episode browser with filters kept in the page's URL, two evaluations' flipped tasks side by side) to one HTML
    file that needs no network, and print its path."""
    from ctu.view.data import ViewError
    from ctu.view.page import write_page

    target = out_file or paths[0] / "view.html"
    try:
        written = write_page(paths, target, max_episodes)
    except ViewError as error:
        raise fail(error, ViewError) from None
    out.print(f"{written.episodes} of {written.episodes_total} episode(s), {written.evaluations} evaluation(s): "
              f"{escape(str(written.path))}")
    if open_page:
        import webbrowser

        webbrowser.open(written.path.absolute().as_uri())
