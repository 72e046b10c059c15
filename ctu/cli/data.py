"""`ctu data prepare` and `ctu data sft`: task rows for RL, conversations for SFT."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ctu.cli.common import EXIT_INTERRUPTED, EXIT_SPEC_ERROR, Imports, err, fail, import_code, load_one, out

data_app = typer.Typer(help="Prepare tau-bench datasets: task rows for RL, conversations for SFT.", no_args_is_help=True)


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

    import_code(imports)
    from ctu.backends.skyrl.datasets import prepare_datasets
    from ctu.components.domains import build_domain

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

    spec = load_one(args).spec
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
        raise fail(error, SFTDataError) from None
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/yellow] nothing written to {escape(str(out_dir))} (the SFT data is written whole "
                  "at the end, so an earlier train.parquet there is as it was); the same command starts again")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    report = data.report()
    rejected = ", ".join(f"{reason} {n}" for reason, n in report["rejected"].items()) or "none"
    shown = f"; {report['tokens']} tokens" if report["tokens"] is not None else ""
    out.print(f"{report['rows']} conversation(s) of {report['tasks']} task(s) kept{shown}; rejected: {rejected}")
    out.print(f"wrote {escape(str(out_dir))}/train.parquet, sft_report.json")


