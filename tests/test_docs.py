"""The README and the guides in docs/: a README read in minutes, every link between them (and the tests' READMEs)
resolving."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import REPO

LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "tests").rglob("README.md"))]


def test_the_readme_is_short_and_indexes_every_guide():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    guides = {path.name for path in (REPO / "docs").glob("*.md")}
    assert guides and guides <= {Path(target).name for target in LINK.findall(readme) if target.startswith("docs/")}


def test_every_link_of_the_readme_and_the_guides_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^(https?:|mailto:|#)", target):
                continue
            if not (page.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_the_docs_generated_tables_match_the_benchmarks_results():
    """Every `<!-- results: NAME -->` block of the docs is what `benchmarks/results.py` renders from
    `benchmarks/results/NAME.json` (figures are what a benchmark wrote, never typed)."""
    import subprocess
    import sys

    checked = subprocess.run([sys.executable, str(REPO / "benchmarks" / "results.py"), "--check"], cwd=REPO,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    blocks = re.findall(r"<!-- results: ([\w.-]+) -->", " ".join(p.read_text() for p in (REPO / "docs").rglob("*.md")))
    assert "chain_check" in blocks


def test_no_results_file_holds_a_machines_path():
    """A results file is read on other machines: no absolute path of the one it was measured on (a scratch folder,
    a checkout), in its figures, command or note (`benchmarks/results.py`'s `portable`)."""
    import json

    absolute = re.compile(r"(?<![\w.:/<>-])/(?:[\w.+@-]+/)+[\w.+@-]+")
    found = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{where}.{index}")
        elif isinstance(value, str) and (match := absolute.search(value)):
            found.append(f"{where}: {match.group(0)}")

    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        walk(json.loads(path.read_text()), path.name)
    assert found == []


def test_a_figure_that_misses_its_goal_is_marked_in_the_generated_table():
    """`results.missing` marks a cell; `render` shows it marked, and the other figures as they were."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import results
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    table = {"columns": ["", "measured", "goal"], "rows": [["fast", "0.5 s", "<= 0.6 s"], ["slow", "0.9 s", "<= 0.6 s"]]}
    results.missing(table, 1, 1)
    rendered = results.render({"table": table, "note": "", "date": "today", "commit": "abc", "command": "x",
                               "reference_loop_seconds": 0.33})
    assert f"| slow | **0.9 s**{results.MISSED} | <= 0.6 s |" in rendered
    assert "| fast | 0.5 s | <= 0.6 s |" in rendered


def test_no_guide_holds_a_commit_hash_outside_its_generated_tables():
    """The README and the guides are a manual (what ctu is, how to use it, what it shows now): how it got here is
    git's and docs/history/'s. A commit of another repository, cited with its address on the line, is provenance."""
    commit = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    generated = re.compile(r"<!-- results: [\w.-]+ -->.*?<!-- /results -->", re.S)
    found = [f"{page.relative_to(REPO)}: {line.strip()[:80]}"
             for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
             for line in generated.sub("", page.read_text()).splitlines()
             if commit.search(line) and "github.com" not in line]
    assert found == []
