"""The `domains` registry entries for tau2's domains, and the base class for a user's own domain.

A domain component names a tau2 domain (or a custom one), the task splits it offers and its params. Specs
reference it in `data.train` and `data.test_sets` (``domain: retail`` or ``domain: {type: telecom, task_set:
small}``). This module imports no tau2 code.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ctu.registry import ComponentParams, registry


class Domain:
    """Base of domain components.

    Class attributes:
        tau2_name: the tau2 domain it loads (None for a custom domain, which provides its own tasks).
        splits: the task splits `data.*.split` may name; `all` is every task.
    """

    tau2_name: ClassVar[str | None] = None
    splits: ClassVar[tuple[str, ...]] = ("train", "test", "all")

    class Params(ComponentParams):
        pass

    def __init__(self, params: ComponentParams) -> None:
        self.params = params


@registry.domains.register("retail")
class RetailDomain(Domain):
    """tau2 retail: orders, returns and exchanges in an online shop (114 tasks: train 74 / test 40)."""

    tau2_name = "retail"


@registry.domains.register("airline")
class AirlineDomain(Domain):
    """tau2 airline: bookings, changes and cancellations (50 tasks: train 30 / test 20)."""

    tau2_name = "airline"


@registry.domains.register("telecom")
class TelecomDomain(Domain):
    """tau2 telecom: technical support where the user acts on their own device (base 114 tasks: train 74 / test 40)."""

    tau2_name = "telecom"

    class Params(ComponentParams):
        task_set: Literal["base", "small", "full"] = "base"
        """tau2's telecom task set: `base` (114 tasks, with train/test splits), `small` (20) or `full` (2285)."""


@registry.domains.register("mock")
class MockDomain(Domain):
    """tau2 mock: a tiny task-management domain for tests."""

    tau2_name = "mock"
