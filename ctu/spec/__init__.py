"""The experiment spec: load YAML (with `extends`, overrides and interpolation), validate, check, dump.

    >>> from ctu.spec import load_spec
    >>> loaded = load_spec("specs/tau_bench.yaml", ["trainer.epochs=3"])   # raises SpecError on any problem
    >>> loaded.spec.trainer.epochs
    3

This package imports no torch, ray, skyrl or tau2: `ctu validate` runs anywhere.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctu.spec.errors import Location, SpecError, SpecIssue
from ctu.spec.loading import Sources, check_plain_data, load_file
from ctu.spec.models import Spec
from ctu.spec.moved import move_backend_entries
from ctu.spec.overrides import apply_override, parse_override, resolve_interpolations
from ctu.spec.secrets import redacted

__all__ = ["LoadedSpec", "Location", "Spec", "SpecError", "SpecIssue", "data_hash", "dump_spec", "import_spec_code", "load_spec", "spec_from_dict", "spec_hash"]


@dataclass
class LoadedSpec:
    """A valid spec with the warnings found while checking it and where each value came from."""

    spec: Spec
    warnings: list[SpecIssue] = field(default_factory=list)
    sources: Sources = field(default_factory=Sources)


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> LoadedSpec:
    """Load, merge, override, interpolate, validate and check one spec file.

    Args:
        path: the YAML spec.
        overrides: ``dotted.key=value`` strings applied after `extends` merging, in order.

    Raises:
        SpecError: listing every problem found (with dotted paths and file:line), for any bad input.
    """
    issues: list[SpecIssue] = []
    data, sources = load_file(Path(path), issues)
    if issues:
        raise SpecError(issues, str(path))
    return _finish(data, sources, overrides, str(path))


def spec_from_dict(data: dict[str, object], overrides: Sequence[str] = (), source: str = "<dict>") -> LoadedSpec:
    """Like `load_spec`, from an already-parsed mapping (no `extends`; no line numbers).

    Raises:
        SpecError: for every problem found.
    """
    if not isinstance(data, dict):
        raise SpecError([SpecIssue("", f"a spec must be a mapping, got {type(data).__name__}")], source)
    data = copy.deepcopy(data)
    if "extends" in data:
        raise SpecError([SpecIssue("extends", "`extends` needs a spec file; use load_spec")], source)
    return _finish(data, Sources({(): Location(source)}), overrides, source)


def _finish(data: dict[str, object], sources: Sources, overrides: Sequence[str], source: str) -> LoadedSpec:
    issues = check_plain_data(data, (), sources)
    if issues:
        raise SpecError(issues, source)
    for item in overrides:
        parsed = parse_override(item)
        if isinstance(parsed, SpecIssue):
            issues.append(parsed)
            continue
        key, value = parsed
        issue = apply_override(data, key, value, item)
        if issue is not None:
            issues.append(issue)
        else:
            sources.replace_subtree(key, {})
            sources.locations[key] = Location(f"override {redacted(item)!r}")
    issues += check_plain_data(data, (), sources)
    issues += resolve_interpolations(data, sources)
    if issues:
        raise SpecError(issues, source)
    issues = import_spec_code(data.get("imports"), sources)
    if issues:  # the spec's components would read as unknown: the import's own error is the one to fix
        raise SpecError(issues, source)
    moved, issues = move_backend_entries(data, sources)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        from ctu.spec.validation import issues_from_validation_error

        raise SpecError(issues + issues_from_validation_error(exc, Spec, data, sources), source) from None
    from ctu.spec.checks import run_checks

    errors, warnings = run_checks(spec)
    if issues or errors:
        raise SpecError(issues + [_locate(issue, sources) for issue in errors], source)
    return LoadedSpec(spec, moved + [_locate(issue, sources) for issue in warnings], sources)


def import_spec_code(imports: Any, sources: Sources | None = None) -> list[SpecIssue]:
    """Import a spec's `imports` (files relative to the current directory, or module names) so their components
    are registered; one issue at ``imports.<i>`` per entry that fails (its exception's type and message).

    Nothing is imported when `imports` is not a list of strings; the schema then reports it.
    """
    from ctu.registry.imports import UserCodeError, import_user_code

    sources = sources or Sources()
    if not isinstance(imports, list) or not all(isinstance(entry, str) for entry in imports):
        return []
    issues: list[SpecIssue] = []
    for index, entry in enumerate(imports):
        try:
            import_user_code(entry)
        except UserCodeError as error:
            issues.append(SpecIssue(f"imports.{index}", str(error), sources.find(("imports", index))))
    return issues


def _locate(issue: SpecIssue, sources: Sources) -> SpecIssue:
    if issue.location is not None:
        return issue
    path = tuple(int(p) if p.isdigit() else p for p in issue.path.split(".")) if issue.path else ()
    return SpecIssue(issue.path, issue.message, sources.find(path))


def spec_to_dict(spec: Spec) -> dict[str, object]:
    """The resolved spec as plain JSON-compatible data (no `extends`; every default filled in)."""
    return spec.model_dump(mode="json")


def dump_spec(spec: Spec) -> str:
    """The resolved spec as YAML. Loading the text again (from the same directory, wherever the file is written)
    gives an equal `Spec`: the files in `imports` are written as absolute paths, which loading makes relative to
    the current directory again. Holds no secrets: API keys are only ever named by environment variable."""
    return yaml.safe_dump(_placed(spec), sort_keys=False, allow_unicode=True, width=120)


def _placed(spec: Spec) -> dict[str, object]:
    """`spec_to_dict` with the files in `imports` as absolute paths (the same files, wherever the command runs)."""
    from ctu.registry.imports import is_file_import

    data = spec_to_dict(spec)
    data["imports"] = [str(Path(entry).resolve()) if is_file_import(entry) else entry for entry in spec.imports]
    return data


def spec_hash(spec: Spec) -> str:
    """SHA-256 (hex) of the resolved spec's canonical JSON, its imported files named by absolute path: equal specs,
    equal hashes, whatever their YAML and whichever directory the command runs in."""
    return data_hash(_placed(spec))


def data_hash(data: object) -> str:
    """SHA-256 (hex) of `data`'s canonical JSON (keys sorted, no spaces). Of a run's ``spec.resolved.yaml`` read as
    plain YAML, it is the `spec_hash` the run recorded unless the file was edited, whatever fields later versions
    of the schema added (a spec loaded again fills those in, and would hash otherwise)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
