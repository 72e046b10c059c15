"""The generator seam: how ctu's agent loop is to run (`LoopSettings`) and what a generator component makes of the
loop the rollout layer built so (`GeneratorComponent`). Data flows one way: the component hands settings down, the
rollout layer builds the loop and hands it back to be returned or wrapped; `ctu.components` never imports
`ctu.rollout`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from ctu.registry import registry


@dataclass(frozen=True)
class LoopSettings:
    """How ctu's agent loop runs a batch.

    Attributes:
        max_concurrent_episodes: episodes in flight at once, over every process.
        processes: 1 runs every episode on the runner's event loop; more spread each batch over as many worker
            processes, each with its own event loop; ``"auto"`` as many as the batch and the machine's cores call
            for (`ctu.rollout.processes.auto_processes`).
    """

    max_concurrent_episodes: int = 256
    processes: int | Literal["auto"] = 1


class GeneratorComponent(Protocol):
    """A built generator component (the `generators` kind's contract)."""

    def loop_settings(self) -> LoopSettings:
        """How ctu's agent loop is to run for this generator (`ctu.rollout.build.build_generator` builds it so)."""
        ...

    def build(self, loop: object) -> object:
        """The generator over `loop`, ctu's agent loop built with `loop_settings()` (a `ctu.rollout.records.Rollout`):
        `loop` itself, or an object wrapping it that keeps the contract (`run_batch`, `run_episode`; checked by
        `ctu.rollout.build.build_generator`)."""
        ...


registry.generators.declare_contract(GeneratorComponent)
