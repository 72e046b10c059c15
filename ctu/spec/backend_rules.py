"""What the spec layer asks of a spec's backend: its own checks and how it counts steps.

The backend itself (`ctu.runners.backend.Backend`, the `backends` kind's one contract, which extends this) lives
above the spec layer; the spec layer sees it only through `BackendRules`, the part a spec check needs, so `ctu.spec`
never imports `ctu.runners`. The contract is declared once, by `ctu.runners.backend`, which every backend module
imports (the built-in ones load with the registry's first lookup): `ctu validate` and `ctu run` check a backend of
one's own for the same members.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ctu.spec.errors import SpecIssue

if TYPE_CHECKING:
    from ctu.spec.models import Spec
    from ctu.spec.training import Trainer


@dataclass(frozen=True)
class StepCounts:
    """How a backend steps through an epoch of `tasks` training tasks (or SFT conversations).

    Attributes:
        per_epoch: training steps an epoch.
        dropped: tasks of each epoch's shuffled order no step trains on.
        optimizer_steps: optimizer steps a training step.
    """

    per_epoch: int
    dropped: int
    optimizer_steps: int


def whole_batch_steps(tasks: int, trainer: Trainer) -> StepCounts:
    """A loop that trains each step's batch in one optimizer step (ctu's own loop on Tinker; the default of a
    backend that says nothing): ``tasks // train_batch_size`` steps an epoch, the last short batch left out, and an
    epoch smaller than a batch one step of all its tasks."""
    if tasks < trainer.train_batch_size:
        return StepCounts(1, 0, 1)
    per_epoch, dropped = divmod(tasks, trainer.train_batch_size)
    return StepCounts(per_epoch, dropped, 1)


def mini_batch_steps(tasks: int, trainer: Trainer) -> StepCounts:
    """A dataloader that drops the last short batch (``drop_last``: an epoch smaller than a batch trains nothing),
    and an optimizer step per mini-batch: ``train_batch_size // policy_mini_batch_size`` a step, one update epoch
    (SkyRL's trainer)."""
    per_epoch, dropped = divmod(tasks, trainer.train_batch_size)
    return StepCounts(per_epoch, dropped, trainer.train_batch_size // trainer.policy_mini_batch_size)


class BackendRules(Protocol):
    """A backend's rules for specs naming it.

    Optional members, read where a backend has them: ``step_counts(tasks, trainer) -> StepCounts`` (how it steps
    through an epoch: `whole_batch_steps` when it has none, `mini_batch_steps` for a dataloader of mini-batches),
    ``how_applied(spec)`` (`how_applied`). ``skyrl_schedule: bool``, the older way to say `mini_batch_steps`, is
    still read, with a deprecation warning.
    """

    def spec_errors(self, spec: Spec) -> Iterator[SpecIssue]:
        """What in `spec` this backend cannot run (each makes the spec invalid); imports nothing heavy."""
        ...

    def spec_warnings(self, spec: Spec) -> Iterator[SpecIssue]:
        """What in `spec` runs on this backend but likely not as meant; imports nothing heavy."""
        ...


def step_counts(spec: Spec, tasks: int) -> StepCounts:
    """How `spec`'s backend steps through an epoch of `tasks` (its ``step_counts``, else `whole_batch_steps`; a
    backend that still says ``skyrl_schedule`` gets `mini_batch_steps` for True, with a deprecation warning)."""
    rules = backend_rules(spec)
    count = getattr(rules, "step_counts", None)
    if count is not None:
        counted: StepCounts = count(tasks, spec.trainer)
        return counted
    legacy = getattr(rules, "skyrl_schedule", None)
    if legacy is not None:
        warnings.warn(f"{type(rules).__name__}.skyrl_schedule is deprecated: define step_counts(tasks, trainer) "
                      "(ctu.spec.backend_rules: mini_batch_steps or whole_batch_steps) instead", DeprecationWarning,
                      stacklevel=2)
        return (mini_batch_steps if legacy else whole_batch_steps)(tasks, spec.trainer)
    return whole_batch_steps(tasks, spec.trainer)


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
