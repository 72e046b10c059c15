"""The page `ctu view` writes: one HTML file holding its data (`ctu.view.data.page_data`), script and style, so it
opens from a cluster's login node or a laptop alike with no network."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.redaction import scrub

if TYPE_CHECKING:
    from ctu.view.data import PageData

HERE = Path(__file__).parent


def render_page(data: PageData, title: str) -> str:
    """The page for `data` as HTML text: the data as JSON in a ``<script type="application/json">`` (``</`` written
    as ``<\\/`` so no string in it ends the script), ``page.js`` and ``page.css`` inline."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    script = (HERE / "page.js").read_text(encoding="utf-8")
    style = (HERE / "page.css").read_text(encoding="utf-8")
    from ctu.output_folders import PAGE_MARK

    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{PAGE_MARK}<title>{html.escape(title)}</title>\n"
            f"<style>{style}</style></head>\n<body><main id=\"app\"></main>\n"
            f"<script id=\"ctu-data\" type=\"application/json\">{payload}</script>\n<script>{script}</script>\n</body></html>\n")


@dataclass(frozen=True)
class WrittenPage:
    """A page `write_page` wrote: its file, the episodes it holds of how many, and its evaluations."""

    path: Path
    episodes: int
    episodes_total: int
    evaluations: int


def write_page(paths: list[Path], out: Path, max_episodes: int) -> WrittenPage:
    """Write the page of the folders `paths` to `out` (a page `ctu view` wrote there before is replaced).

    Raises:
        ViewError: a folder is neither a run directory nor a `ctu eval` folder; `out` is a folder, or a file `ctu
            view` did not write (`ctu.output_folders.not_a_page`), which is left as it was.
    """
    from ctu.output_folders import not_a_page
    from ctu.view.data import ViewError, page_data

    if out.is_dir() or not_a_page(out):
        raise ViewError(f"{out} is not a page `ctu view` wrote: name another --out; it was left as it was")
    data = page_data(paths, max_episodes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(scrub(render_page(data, "ctu view: " + ", ".join(path.name for path in paths))), encoding="utf-8")
    return WrittenPage(out, len(data["episodes"]), data["episodes_total"], len(data["columns"]))
