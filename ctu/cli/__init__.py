"""The `ctu` command line: thin wrappers over the library, printed with rich, a module per command group (`specs`,
`run`, `evaluation`, `data`, `tasks`, `view`; what they share in `common`); this module assembles them into `app`.

Exit codes: 0 success; 1 a failed check (`docs --check`) or an environment problem (a broken plugin);
2 a bad spec or bad arguments (a run directory that cannot be run or resumed as asked included); 3 a command that
measured or kept nothing; 130 after Ctrl-C. No traceback reaches the user for a bad spec. Importing this package
imports no torch, ray or skyrl.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from ctu.cli.common import EXIT_INTERRUPTED, EXIT_NOTHING_MEASURED, EXIT_SPEC_ERROR, PATH_ERRORS, err
from ctu.cli.data import data_app
from ctu.cli.evaluation import compare, eval_
from ctu.cli.run import run
from ctu.cli.specs import components, docs, explain, schema, validate
from ctu.cli.tasks import tasks_app
from ctu.cli.view import view

__all__ = ["EXIT_INTERRUPTED", "EXIT_NOTHING_MEASURED", "EXIT_SPEC_ERROR", "app", "main"]

app = typer.Typer(
    name="ctu",
    help="Train tool-using LLM agents with GRPO on tau-bench domains, from one checked YAML spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an unexpected error instead of writing it to a file.")] = False) -> None:
    """Train tool-using LLM agents with GRPO on tau-bench domains, from one checked YAML spec."""


app.command()(validate)
app.command()(explain)
app.command()(run)
app.command("eval")(eval_)
app.command()(compare)
app.command()(schema)
app.command()(docs)
app.command()(components)
app.command()(view)
app.add_typer(data_app, name="data")
app.add_typer(tasks_app, name="tasks")


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


