"""Benchmark figures as data: each benchmark records its latest result as JSON under
`benchmarks/results/<name>.json` (when, on which commit, this machine's speed, the command, the figures, and the
table the docs show), and the docs' tables are generated from those files, never typed.

Run: `uv run python benchmarks/results.py` rewrites every generated block of the README and the docs from the results;
`--check` only reports the blocks that differ (exit 1), as CI does (tests/test_docs.py).

A generated block in the README or a doc is the text between ``<!-- results: NAME -->`` and ``<!-- /results -->``:
a table and a line saying when, where and how it was measured.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from machine import REFERENCE_LOOP_S

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs"
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/-])/(?:[\w.+@-]+/)*[\w.+@-]+")
"""An absolute POSIX path inside a string (not a URL's path: no scheme or host before it)."""


def portable(value: Any) -> Any:
    """`value` (any JSON) with the machine's paths taken out of its strings: a path inside the repository relative
    to it, any other absolute path as ``<elsewhere>/`` and its last two parts (a scratch folder's name on one
    machine means nothing on another)."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    if not isinstance(value, str):
        return value

    def local(match: re.Match[str]) -> str:
        path = Path(match.group(0))
        if path == REPO or REPO in path.parents:
            return str(path.relative_to(REPO)) or "."
        return "<elsewhere>/" + "/".join(path.parts[-2:])

    return ABSOLUTE_PATH.sub(local, value)


UNCOMMITTED = " with uncommitted changes"
"""What follows a commit's name when the working tree had changes (`checkout`)."""


def checkout() -> str:
    """This checkout's commit, short, said to have uncommitted changes when the working tree has them ("" outside a
    git checkout). Records under `RESULTS` are outputs, not what a benchmark runs: a benchmark that writes two (the
    chain check of both backends) does not call the second one's checkout changed by the first."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                              f":!{RESULTS.relative_to(REPO)}"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return commit + UNCOMMITTED if commit and changed else commit


def record(name: str, figures: dict[str, Any], table: dict[str, list], loop: float, note: str = "", *,
           command: str | None = None, commit: str | None = None, date: str | None = None) -> Path:
    """Write `benchmarks/results/<name>.json` (with no machine path: `portable`): the date (UTC), the commit (said to have uncommitted changes when the
    working tree has them), the command (this process's argv),
    `loop` (this machine's reference loop in s, `machine.reference_loop_seconds`), `figures` (any JSON), and
    `table` (``{"columns": [...], "rows": [[...], ...]}``, cells already formatted) with `note` (a line under it).
    `command`, `commit` and `date` replace this process's own when the figures were measured by other processes
    (a benchmark whose runs are separate commands, reported together afterwards).

    Returns:
        The file written.
    """
    if commit is None:
        commit = checkout()
    result = portable({
        "benchmark": name,
        "date": date or datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or None,
        "command": command or "uv run python " + " ".join([str(Path(sys.argv[0]).resolve().relative_to(REPO)), *sys.argv[1:]]),
        "reference_loop_seconds": round(loop, 3),
        "figures": figures,
        "table": table,
        "note": note,
    })
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


MISSED = " ✗ misses its goal"
"""What a figure that misses its goal is marked with in a generated table."""


def missing(table: dict[str, list], row: int, column: int) -> None:
    """Mark cell (`row`, `column`) of `table` (``{"columns": ..., "rows": ...}``) as a figure that misses its goal
    (kept in ``table["misses"]``; `render` marks it)."""
    table.setdefault("misses", []).append([row, column])


def render(result: dict[str, Any]) -> str:
    """A result as the docs show it: its table in Markdown, each figure that misses its goal marked (`MISSED`), then
    when and how it was measured. A column with no figure in any row (each cell empty or "-": a runner the command
    did not run) is left out."""
    columns, rows = result["table"]["columns"], [list(row) for row in result["table"]["rows"]]
    for row, column in result["table"].get("misses", []):
        rows[row][column] = f"**{rows[row][column]}**{MISSED}"
    kept = [i for i in range(len(columns)) if i == 0 or any(str(row[i]) not in ("", "-") for row in rows)]
    columns, rows = [columns[i] for i in kept], [[row[i] for i in kept] for row in rows]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    measured = (f"Measured {result['date']} on commit {result['commit']}, `{result['command']}`; this machine's "
                f"reference loop {result['reference_loop_seconds']:.2f} s (the goals' day: {REFERENCE_LOOP_S:.2f} s).")
    return "\n".join(lines) + "\n\n" + " ".join(part for part in (result.get("note"), measured) if part) + "\n"


def generated(text: str) -> str:
    """`text` with each generated block rewritten from its result file.

    Raises:
        SystemExit: a block names a result that does not exist.
    """
    def fill(match: re.Match[str]) -> str:
        path = RESULTS / f"{match['name']}.json"
        if not path.exists():
            raise SystemExit(f"a generated block names {path.relative_to(REPO)}, which does not exist")
        return match.group(1) + render(json.loads(path.read_text())) + match.group(4)

    return BLOCK.sub(fill, text)


def stale_docs() -> list[Path]:
    """The README and the docs whose generated blocks differ from their results."""
    return [path for path in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))] if generated(path.read_text()) != path.read_text()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 naming the docs whose generated tables are stale")
    args = parser.parse_args()
    stale = stale_docs()
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)}: its generated tables differ from benchmarks/results/ "
                  "(run `uv run python benchmarks/results.py`)")
        raise SystemExit(1 if stale else 0)
    for path in stale:
        path.write_text(generated(path.read_text()))
        print(f"rewrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
