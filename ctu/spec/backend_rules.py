"""What the spec layer asks of a spec's backend: its own checks and how it counts steps.

The backend itself (`ctu.runners.backend.Backend`, the `backends` kind's one contract, which extends this) lives
above the spec layer; the spec layer sees it only through `BackendRules`, the part a spec check needs, so `ctu.spec`
never imports `ctu.runners`. The contract is declared once, by `ctu.runners.backend`, which every backend module
imports (the built-in ones load with the registry's first lookup): `ctu validate` and `ctu run` check a backend of
one's own for the same members.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Protocol

from ctu.spec.errors import SpecIssue

if TYPE_CHECKING:
    from ctu.spec.models import Spec


class BackendRules(Protocol):
    """A backend's rules for specs naming it.

    Attributes:
        skyrl_schedule: whether the backend counts steps as SkyRL does: an epoch is ``tasks // train_batch_size``
            steps, its last short batch dropped (an epoch smaller than a batch trains nothing), and each step is
            ``train_batch_size // policy_mini_batch_size`` optimizer steps. False (ctu's own loop on Tinker): an
            epoch smaller than a batch is one step of all its tasks, and each step one optimizer step.
    """

    skyrl_schedule: ClassVar[bool]

    def spec_errors(self, spec: Spec) -> Iterator[SpecIssue]:
        """What in `spec` this backend cannot run (each makes the spec invalid); imports nothing heavy."""
        ...

    def spec_warnings(self, spec: Spec) -> Iterator[SpecIssue]:
        """What in `spec` runs on this backend but likely not as meant; imports nothing heavy."""
        ...


def how_applied(spec: Spec) -> list[str]:
    """How `spec`'s backend applies its settings where it differs from the generic sections' meaning (SkyRL's
    trainer's), one line each: the backend's optional ``how_applied(spec)`` (a backend without one: none). `ctu
    explain` prints them."""
    rules = backend_rules(spec)
    describe = getattr(rules, "how_applied", None)
    return list(describe(spec)) if describe is not None else []


def backend_rules(spec: Spec) -> BackendRules:
    """The rules of `spec`'s backend (the registered backend, built from the spec's `backend` params).

    Raises:
        ComponentError: the backend is no longer registered.
    """
    rules: BackendRules = spec.backend.build()
    return rules
