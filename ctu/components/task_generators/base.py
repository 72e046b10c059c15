"""The task-generator seam: what a task generator is handed (`GenerationContext`) and what it returns (`Proposal`).

A task generator proposes training tasks for one domain; it never decides which are kept. Every proposal goes
through the same verification (`ctu.tasks.verify`), whichever generator made it, so a generator of one's own
(``@registry.task_generators.register("mine")``) is held to the same standard as the built-in `template` and `llm`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ctu.registry import registry

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from tau_bench_env.domains import Domain


@dataclass(frozen=True)
class Proposal:
    """One proposed task, as the generator produced it.

    Attributes:
        task: the task in tau2's JSON format (a `tau2.data_model.tasks.Task` as a dict; its ``id`` is replaced by
            the pipeline's), or None when nothing could be read from the generator's output.
        rejection: with `task` None, why (`ctu.tasks.verify.REASONS`, e.g. ``"malformed"``).
        detail: one line on the rejection (e.g. the JSON error and the text's start).
    """

    task: dict[str, object] | None
    rejection: str | None = None
    detail: str = ""


@dataclass
class GenerationContext:
    """What a task generator is handed for one proposal.

    Attributes:
        domain: the domain the tasks are for, built (its tools, policy, database: `tau_bench_env.domains.Domain`).
        domain_type: its registered name (e.g. ``"retail"``).
        seed: the generation's seed.
        examples: tasks of the domain a generator may show as examples (the domain's training split, never a
            test set).
        index: the number of this proposal within the generation (0, 1, ...): with `seed`, all a generator may
            draw randomness from, so that a resumed generation proposes what an uninterrupted one would.
    """

    domain: Domain
    domain_type: str
    seed: int
    examples: list[Task] = field(default_factory=list)
    index: int = 0

    def rng(self) -> random.Random:
        """A random generator seeded by (`seed`, `index`) alone: the same proposal on every rerun."""
        return random.Random(f"{self.seed}:{self.index}")


class TaskGenerator(Protocol):
    """A built task generator (the `task_generators` kind's contract).

    Optionally it has ``inputs_fingerprint() -> str``: a digest of the content of what it reads beyond its params
    (a template file, a prompt file), recorded in a generation's folder so that a generation continued after that
    content changed is refused instead of mixing tasks of both versions (`ctu.tasks.generate`); and
    ``train_share(task) -> float``: the share in [0, 1] of tasks like a kept `task` that the ``train`` split keeps
    (1.0 when absent; the `template` generator's per-template `train_share`); and ``train_only(task) -> bool``:
    whether a kept `task` goes to the ``train`` split alone, never held out nor in another split (False when absent;
    the `template` generator's per-template `train_only`). Both are functions of the task alone so that a rerun
    writes the same splits (`ctu.tasks.generate.split_ids`)."""

    async def propose(self, context: GenerationContext) -> list[Proposal]:
        """The tasks proposed for `context.index` (usually one; an LLM may propose several per request). A
        malformed answer is a `Proposal` with a `rejection`, never an exception; an endpoint that stays down
        raises `ctu.components.endpoint.EndpointError`, which stops the generation (what was verified is kept)."""
        ...


registry.task_generators.declare_contract(TaskGenerator)
