"""`SpecError`: every problem of a spec at once, each with its dotted path and where it was written."""

from __future__ import annotations

from dataclasses import dataclass

from ctu.errors import CtuError


@dataclass(frozen=True)
class Location:
    """Where a value came from: a YAML file and 1-based line, or a command-line override."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(frozen=True)
class SpecIssue:
    """One problem (or warning) in a spec.

    Attributes:
        path: dotted path of the offending key, list indices as numbers (``rewards.1.weight``); "" for the root.
            The same syntax as a command-line override, so it can be fixed with ``path=value``.
        message: what is wrong, with a "did you mean" where one helps.
        location: the file and line (or override) it came from, when known.
    """

    path: str
    message: str
    location: Location | None = None

    def __str__(self) -> str:
        where = f"  [{self.location}]" if self.location else ""
        return f"{self.path or '<spec>'}: {self.message}{where}"


class SpecError(CtuError):
    """A spec is invalid. `issues` lists every problem found; `str()` prints one per line.

    Raised by `ctu.spec.load_spec` for any bad input: YAML syntax, `extends`, overrides, interpolation,
    schema and cross-field checks. The CLI prints it and exits with code 2.
    """

    def __init__(self, issues: list[SpecIssue], source: str | None = None) -> None:
        if not issues:
            raise ValueError("SpecError needs at least one issue")
        self.issues = list(issues)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        count = len(self.issues)
        lines = [f"{head}{count} problem{'s' if count != 1 else ''} in spec"]
        lines += [f"  {issue}" for issue in self.issues]
        return "\n".join(lines)
