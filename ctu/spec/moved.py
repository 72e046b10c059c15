"""Spec entries that moved, read from their old place for one release with a deprecation warning.

A backend owns the knobs only it has, in its own params (``backend: {type: skyrl, ...}``), the way a component owns
its own; the generic sections keep what every backend means alike. Entries that once sat in a generic section are
moved into the backend's section before the schema sees the spec: a spec that still writes one there loads as
before, with a warning naming the new place; one whose backend has no such entry gets an error naming the backends
that do. Errors about a moved value point at the line it was written on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctu.spec.errors import SpecIssue
from ctu.spec.loading import PathKey, Sources, dotted

if TYPE_CHECKING:
    from ctu.registry import ComponentInfo

MOVED_TO_BACKEND: dict[PathKey, str] = {
    ("trainer", "micro_train_batch_size_per_gpu"): "micro_train_batch_size_per_gpu",
    ("trainer", "fully_async"): "fully_async",
    ("algorithm", "policy_loss"): "policy_loss",
    ("algorithm", "off_policy_correction"): "off_policy_correction",
    ("algorithm", "entropy_coef"): "entropy_coef",
    ("algorithm", "loss_reduction"): "loss_reduction",
    ("algorithm", "value_clip"): "value_clip",
}
"""Old place -> the entry's name in the backend's section (moved 2026-11-29, the last three 2026-12-07; the old place
is read until the next release). Each is SkyRL's alone: the tinker backend's loop has neither micro-batches, nor
asynchronous training, nor a loss other than its `loss` (no entropy term, Tinker's own reduction, no critic)."""

DEFAULT_BACKEND = "skyrl"
"""The backend of a spec that names none (`Spec.backend`'s default)."""


def move_backend_entries(data: dict[str, object], sources: Sources) -> tuple[list[SpecIssue], list[SpecIssue]]:
    """Move every `MOVED_TO_BACKEND` entry `data` still writes at its old place into its ``backend`` section, in
    place; `sources` follows, so the moved value's errors name the line it was written on.

    Returns:
        ``(warnings, errors)``: a deprecation warning per entry moved, and per entry dropped because its backend has
        no such entry and its value is the default ("off": a run's ``spec.resolved.yaml`` written before the move
        says ``fully_async: null`` whatever its backend); an error per entry written at both places, or set to
        something else on a backend without it (naming the registered backends that have it), that entry then
        removed from `data` so the schema does not report it again. A backend `data` names that is not registered is left for
        the schema to report.
    """
    warnings: list[SpecIssue] = []
    errors: list[SpecIssue] = []
    present = [(old, new) for old, new in MOVED_TO_BACKEND.items() if _has(data, old)]
    if not present:
        return warnings, errors
    backend = data.get("backend", DEFAULT_BACKEND)
    name = backend if isinstance(backend, str) else backend.get("type") if isinstance(backend, dict) else None
    fields = _params_fields(name)
    if fields is None:
        return warnings, errors
    section = backend if isinstance(backend, dict) else {"type": name}
    for old, new in present:
        where = sources.find(old)
        parent = data[str(old[0])]
        assert isinstance(parent, dict)
        if new not in fields:
            value = parent.pop(old[-1])
            owners = {info.name: info.params_model.model_fields[new] for info in _backends()
                      if new in info.params_model.model_fields}
            if all(value == field.default for field in owners.values()):  # "off", as a resolved spec writes it
                warnings.append(SpecIssue(dotted(old), f"deprecated: the {name} backend has no `{new}`, and this "
                                                       "value is its default: remove it", where))
                continue
            owned = f"only {', '.join(owners)} has it, as `backend.{new}`" if owners else "no backend has it"
            errors.append(SpecIssue(dotted(old), f"the {name} backend has no `{new}` ({owned}): remove it", where))
            continue
        if new in section:
            parent.pop(old[-1])
            errors.append(SpecIssue(dotted(old), f"set twice: here and as `backend.{new}` (its place now): remove this one", where))
            continue
        section[new] = parent.pop(old[-1])
        data["backend"] = section
        moved = {("backend", new, *key[len(old):]): loc for key, loc in sources.locations.items() if key[: len(old)] == old}
        sources.replace_subtree(old, {})
        sources.locations.update(moved)
        warnings.append(SpecIssue(dotted(old), f"deprecated: moved to `backend.{new}` (the {name} backend's own "
                                               "section); read from here until the next release", where))
    return warnings, errors


def _has(data: dict[str, object], path: PathKey) -> bool:
    parent = data.get(str(path[0]))
    return isinstance(parent, dict) and path[-1] in parent


def _params_fields(name: object) -> dict[str, object] | None:
    """The field names of backend `name`'s params model, or None when no backend is registered as `name`."""
    from ctu.registry import registry

    if not isinstance(name, str) or name not in registry.backends:
        return None
    return dict(registry.backends.get(name).params_model.model_fields)


def _backends() -> list[ComponentInfo]:
    from ctu.registry import registry

    return list(registry.backends)
