"""Errors a user can cause, each printed by the CLI without a traceback.

`SpecError` (a bad spec, exit code 2) lives in `ctu.spec.errors`; the errors here concern components and the
registry, and are shared by every layer without importing any of them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CtuError(Exception):
    """Base class of the errors ctu reports to users as a message, never as a traceback."""


class NothingMeasuredError(CtuError):
    """A command ran but measured or kept nothing (every episode an infrastructure error, no conversation kept):
    it writes no result that looks measured, and the CLI exits 3 (`ctu.cli.EXIT_NOTHING_MEASURED`)."""


class RegistryError(CtuError):
    """A component was registered wrongly: a name taken twice, a params model that is not a `ComponentParams`."""


class ComponentError(CtuError):
    """A component could not be found or built (unknown name, failed entry point, missing implementation)."""


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The up to `n` candidates most similar to `name` (difflib ratio >= 0.6), best first; failing
    that, the candidates that contain `name` (at least 3 characters).

    Used for every "did you mean" in ctu: unknown spec keys, unknown component names, unknown kinds.
    """
    pool = sorted(set(candidates))
    matches = difflib.get_close_matches(str(name), pool, n=n, cutoff=0.6)
    if not matches and len(str(name)) >= 3:
        matches = [c for c in pool if str(name).lower() in c.lower()][:n]
    return matches


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A " (did you mean 'x' or 'y'?)" suffix for an unknown `name`, or "" when nothing is close."""
    matches = closest(name, candidates)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"
