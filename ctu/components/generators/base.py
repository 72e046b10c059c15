"""The generator seam: what a generator component is handed and what it builds."""

from __future__ import annotations

from typing import Any, Literal, Protocol


class LoopSetup(Protocol):
    """What a generator component is handed: the rollout layer's `RolloutSetup`, seen from here only through
    the loop it offers (so `ctu.components` never imports `ctu.rollout`)."""

    def agent_loop(self, max_concurrent_episodes: int | None = None, processes: int | Literal["auto"] = 1) -> Any:
        """ctu's agent loop, a `ctu.rollout.records.Rollout`, over the setup: on this process's event loop, or
        each batch spread over `processes` worker processes (``"auto"``: as many as the episodes and the
        machine's cores call for)."""
        ...


class GeneratorComponent(Protocol):
    """A built generator component (the `generators` kind's contract)."""

    def build(self, setup: LoopSetup) -> object:
        """A generator over `setup` (ctu's loop, `setup.agent_loop()`, or one of its own) with
        ctu's rollout contract, `ctu.rollout.records.Rollout` (`run_batch`, `run_episode`; checked by
        `ctu.rollout.build.build_generator`)."""
        ...
