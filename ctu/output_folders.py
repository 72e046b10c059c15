"""Output folders a command reuses are never silently mixed, and never lose a measurement: what in a folder the
command did not write, and where what a command replaces goes.

Each command that writes into ``--out`` (`ctu eval`, `ctu tasks generate`, `ctu tasks calibrate`, `ctu data sft`)
refuses a folder holding anything else, and leaves it as it was; each checks its own record of what it wrote (its
identity) before reusing the rest. A resumed run replays the steps after its checkpoint: what it wrote of them
before (metric lines, trajectory files) is set aside under ``superseded/`` (`set_aside`), never deleted.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from pathlib import Path

SUPERSEDED = "superseded"
"""The folder of a run directory that holds what a resume replaced (`set_aside`)."""
VIEW_PAGE = "view.html"
"""`ctu view`'s page, written by default into the first folder it shows (a run directory or an evaluation)."""
PAGE_MARK = '<meta name="generator" content="ctu view">'
"""What marks a file as a page `ctu view` wrote (in its head): only such a file is replaced by another page."""
REGRADED = "regraded"
"""The folder `ctu eval --regrade` writes its re-scored evaluations into, inside the evaluation it re-scores."""
READERS_OUTPUTS = frozenset({VIEW_PAGE})
"""What a command that reads a folder writes into it (`ctu view`'s page): part of every folder's own contents, so
the command that made the folder continues it (`unowned`)."""


def unowned(folder: Path, own: Collection[str], record: tuple[str, str] | None = None) -> list[str]:
    """What in `folder` a command whose files are `own` did not write, sorted: every other entry (a ``.NAME.tmp``
    file being written excepted; ctu's readers' outputs, `READERS_OUTPUTS`, are ctu's), and, with `record`
    ``(output, its record)``, the output when its record is missing (e.g. a task set of one's own named
    ``tasks.json``); [] when `folder` does not exist."""
    if not folder.is_dir():
        return []
    found = sorted(entry.name for entry in folder.iterdir() if entry.name not in own and entry.name not in READERS_OUTPUTS
                   and not (entry.name.startswith(".") and entry.name.endswith(".tmp")))
    if record is not None and not found and (folder / record[0]).exists() and not (folder / record[1]).exists():
        found = [f"{record[0]} without {record[1]}"]
    return found


def set_aside(folder: Path, relative: str, lines: Sequence[str] | None = None) -> Path:
    """Keep what a resume is about to replace, under ``<folder>/superseded/<UTC time>/<relative>``: the file
    ``<folder>/<relative>`` moved there whole, or, with `lines`, those lines (each without its newline) appended
    there, the file left to its writer. Several calls of one resume (one process) share the time's folder.

    Returns:
        The file written.
    """
    target = folder / SUPERSEDED / _RESUMED_AT / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if lines is None:
        (folder / relative).replace(target)
    else:
        from ctu.jsonl import appending

        with appending(target) as handle:
            handle.writelines(line + "\n" for line in lines)
    return target


_RESUMED_AT = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
"""This process's folder name under ``superseded/`` (UTC, to the second)."""


def not_a_page(path: Path) -> bool:
    """Whether `path` is a file `ctu view` did not write (no `PAGE_MARK` in its first 4 KiB): never replaced."""
    if not path.exists():
        return False
    with path.open("rb") as handle:
        return PAGE_MARK.encode() not in handle.read(4096)


def refusal(folder: Path, command: str, found: list[str]) -> str:
    """The message refusing `folder` to `command` for the entries `found` (`unowned`)."""
    shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
    return f"{folder} holds files `{command}` does not write ({shown}): name another --out; nothing there is overwritten"
