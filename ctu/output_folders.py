"""Output folders a command reuses are never silently mixed: what in a folder the command did not write.

Each command that writes into ``--out`` (`ctu eval`, `ctu tasks generate`, `ctu tasks calibrate`, `ctu data sft`)
refuses a folder holding anything else, and leaves it as it was; each checks its own record of what it wrote (its
identity) before reusing the rest.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path


def unowned(folder: Path, own: Collection[str], record: tuple[str, str] | None = None) -> list[str]:
    """What in `folder` a command whose files are `own` did not write, sorted: every other entry (a ``.NAME.tmp``
    file being written excepted), and, with `record` ``(output, its record)``, the output when its record is missing
    (e.g. a task set of one's own named ``tasks.json``); [] when `folder` does not exist."""
    if not folder.is_dir():
        return []
    found = sorted(entry.name for entry in folder.iterdir()
                   if entry.name not in own and not (entry.name.startswith(".") and entry.name.endswith(".tmp")))
    if record is not None and not found and (folder / record[0]).exists() and not (folder / record[1]).exists():
        found = [f"{record[0]} without {record[1]}"]
    return found


def refusal(folder: Path, command: str, found: list[str]) -> str:
    """The message refusing `folder` to `command` for the entries `found` (`unowned`)."""
    shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
    return f"{folder} holds files `{command}` does not write ({shown}): name another --out; nothing there is overwritten"
