"""The invalid-spec corpus: every file in tests/invalid_specs/ fails with the expected dotted path and message.

Each case starts with one or more ``# expect: <dotted.path> | <message fragment>`` lines (``<spec>`` for the
root); files starting with ``_`` are shared bases, not cases. Also: bad command-line overrides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctu.spec import SpecError, load_spec

from .conftest import REPO

CORPUS = REPO / "tests" / "invalid_specs"
CASES = sorted(p for p in CORPUS.glob("*.yaml") if not p.name.startswith("_"))


def expectations(path: Path) -> list[tuple[str, str]]:
    found = []
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            where, message = line.removeprefix("# expect:").split("|", 1)
            where = where.strip()
            found.append(("" if where == "<spec>" else where, message.strip()))
    return found


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_invalid_spec_reports_expected_problems(case: Path, monkeypatch):
    monkeypatch.delenv("CTU_CORPUS_UNSET_VARIABLE", raising=False)
    expected = expectations(case)
    assert expected, f"{case.name} has no `# expect:` line"
    with pytest.raises(SpecError) as info:
        load_spec(case)
    issues = info.value.issues
    for path, fragment in expected:
        matching = [issue for issue in issues if issue.path == path]
        assert matching, f"no issue at {path!r}; got {[str(i) for i in issues]}"
        assert any(fragment in issue.message for issue in matching), (
            f"no issue at {path!r} says {fragment!r}; got {[str(i) for i in matching]}"
        )
    assert len(issues) == len(expected), f"unexpected extra issues: {[str(i) for i in issues]}"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_issues_point_at_a_file_and_line(case: Path, monkeypatch):
    """Each issue that is not a whole-file problem names the file and the line the value was written on."""
    monkeypatch.delenv("CTU_CORPUS_UNSET_VARIABLE", raising=False)
    with pytest.raises(SpecError) as info:
        load_spec(case)
    for issue in info.value.issues:
        assert issue.location is not None, str(issue)
        assert Path(issue.location.file).suffix == ".yaml"
        if issue.path and "circular" not in issue.message:
            assert issue.location.line is not None, str(issue)


def test_line_numbers_are_those_of_the_offending_key():
    case = CORPUS / "several_problems.yaml"
    lines = case.read_text().splitlines()
    with pytest.raises(SpecError) as info:
        load_spec(case)
    for issue in info.value.issues:
        assert issue.location.file == str(case)
        written = lines[issue.location.line - 1]
        assert issue.path.split(".")[-1] in written or issue.path.split(".")[0] in written, (issue, written)


BASE = CORPUS / "_base.yaml"


@pytest.mark.parametrize(
    ("override", "path", "fragment"),
    [
        ("trainer.epochs=abc", "trainer.epochs", "valid integer"),
        ("trainer.epochz=3", "trainer.epochz", "did you mean 'epochs'"),
        ("trainer.epochs", "trainer.epochs", "dotted.key=value"),
        ("=3", "=3", "dotted.key=value"),
        ("data.train.5.split=test", "data.train.5", "no item 5 in a list of 1"),
        ("experiment.name.first=x", "experiment.name", "inside str value"),
        ("extends=other.yaml", "extends", "cannot be overridden"),
        ("rollout.parser=hermse", "rollout.parser.type", "did you mean 'hermes'"),
        ("data.train.0.split=tset", "data.train.0.split", "has no split 'tset'"),
    ],
)
def test_bad_overrides_are_reported_at_their_path(override, path, fragment):
    with pytest.raises(SpecError) as info:
        load_spec(BASE, [override])
    issues = [issue for issue in info.value.issues if issue.path == path]
    assert issues, [str(i) for i in info.value.issues]
    assert fragment in issues[0].message
    assert "override" in issues[0].location.file


def test_every_problem_is_listed_at_once():
    with pytest.raises(SpecError) as info:
        load_spec(BASE, ["trainer.epochs=abc", "rollout.temperature=hot", "trainer.optimizer.lrr=1", "bogus"])
    paths = {issue.path for issue in info.value.issues}
    # A malformed override stops before schema validation, so fix that first ...
    assert paths == {"bogus"}
    with pytest.raises(SpecError) as info:
        load_spec(BASE, ["trainer.epochs=abc", "rollout.temperature=hot", "trainer.optimizer.lrr=1"])
    # ... then every schema problem comes at once.
    assert {issue.path for issue in info.value.issues} == {"trainer.epochs", "rollout.temperature", "trainer.optimizer.lrr"}
