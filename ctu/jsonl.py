"""JSON Lines files as ctu reads them back: one JSON value a line, lines split at ``\\n`` alone.

ctu writes JSON with ``ensure_ascii=False`` (a policy's text as it was written), so a line may hold U+2028, U+2029
or U+0085, which `str.splitlines` also takes for line breaks: split there, one episode's line reads as two lines
cut short and the episode is lost. Every reader of a JSON Lines file splits with `text_lines`.

A writer that continues a file a kill may have cut mid-line opens it with `appending`: the cut line stays a cut line
of its own (skipped by readers) instead of swallowing the first line written after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def text_lines(path: Path, errors: str = "strict") -> list[str]:
    """The lines of the UTF-8 file `path` (`errors` as `bytes.decode` takes it), split at ``\\n`` alone, without the
    empty text after a final newline; [] when `path` does not exist.

    Raises:
        OSError: `path` exists and cannot be read. UnicodeDecodeError: with ``errors="strict"``, it is not UTF-8.
    """
    if not path.exists():
        return []
    lines = path.read_bytes().decode("utf-8", errors=errors).split("\n")  # no newline translation: a "\r" stays
    return lines[:-1] if lines and lines[-1] == "" else lines


@contextmanager
def appending(path: Path) -> Iterator[TextIO]:
    """`path` opened to append UTF-8 text (created if missing), a newline written first when it ends mid-line.

    Raises:
        OSError: it cannot be opened.
    """
    cut = False
    with path.open("a+b") as raw:
        if size := raw.seek(0, 2):
            raw.seek(size - 1)
            cut = raw.read(1) != b"\n"
    with path.open("a", encoding="utf-8") as handle:
        if cut:
            handle.write("\n")
        yield handle
