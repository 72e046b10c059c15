"""The backend interface: everything `ctu validate`, `ctu run` (with `--dry-run`, `--resume`) and `ctu eval` ask of
the place a spec trains.

A backend is a component of the `backends` kind: a class registered under the name a spec's ``backend.type`` uses,
with its `Params` as the rest of the spec's ``backend`` section, built as ``cls(params)``::

    @registry.backends.register("my_cluster")
    class MyClusterBackend:
        class Params(ComponentParams):
            queue: str = "gpu"

        def __init__(self, params: Params) -> None: ...
        # ...the methods of `Backend`

ctu ships `skyrl` (`ctu.backends.skyrl.backend`) and `tinker` (`ctu.backends.tinker.backend`); docs/extending.md's "Add a
backend" walks through a toy one (`tests/support/toy_backend.py`). The split follows what a user does with a spec:
check it, see what it would launch, launch or resume it, and evaluate what it trained.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ctu.registry import registry
from ctu.spec.backend_rules import BackendRules

if TYPE_CHECKING:
    from ctu.components.chat_templates.base import Tokenizer
    from ctu.rollout.sampling import Sampler
    from ctu.runners.rundir import RunDir
    from ctu.spec.models import Spec

__all__ = ["Backend", "LaunchPlan", "PolicyHandle", "backend_of", "run_backend"]


@dataclass(frozen=True)
class LaunchPlan:
    """What `ctu run --dry-run` prints for a spec.

    Attributes:
        title: the heading of `config` (e.g. "SkyRL config (accepted by SkyRL's validate_cfg)").
        config: the backend's resolved config as text (YAML).
        steps: what a launch would do, in order, one readable line each.
    """

    title: str
    config: str
    steps: list[str]


PolicyHandle = tuple["Sampler", "Tokenizer"]
"""A policy ready for the agent loop: ``(sampler, tokenizer)`` (a Hugging Face tokenizer: `Tokenizer`)."""


class Backend(BackendRules, Protocol):
    """The `backends` kind's contract: one training backend (its `BackendRules` plus what follows).

    `spec_errors`, `spec_warnings` and `policies` import nothing heavy (`ctu validate` runs them anywhere);
    `deep_check` and `plan` may import the backend's own packages; `run` and `open_policy` start what they need.
    """

    def deep_check(self, spec: Spec, run_dir: Path) -> tuple[list[str], list[str]]:
        """``(errors, warnings)`` of `ctu validate --deep`: the backend's own checks beyond `spec_errors` (e.g.
        SkyRL's validation of the resolved config, and the GPU packages missing on this machine), as messages."""
        ...

    def plan(self, spec: Spec, run_dir: RunDir) -> LaunchPlan:
        """The resolved config and launch steps of `spec` in `run_dir` (`ctu run --dry-run`); runs nothing.

        Raises:
            SpecError: the backend rejects the resolved config.
        """
        ...

    def run(self, spec: Spec, run_dir: RunDir, *, resume: bool, progress: bool, verbose: bool) -> int:
        """Train `spec` in `run_dir` (fresh, or from its newest checkpoint with `resume`); returns the last step
        trained. `progress`: show ctu's progress bars; `verbose`: show the libraries' logs live as well as in the
        run directory's log file. Writes ``spec.resolved.yaml`` and ``state.json`` (with ``"backend": <its registered name>``) so
        `ctu run --resume` and `ctu eval --run-dir` find the run.

        Raises:
            RunError: nothing to resume. PreflightError and the like: the backend cannot start.
        """
        ...

    def policies(self, run_dir: RunDir) -> dict[int, str]:
        """The policies a run in `run_dir` saved, by step: a Hugging Face folder or a backend-specific locator
        (e.g. ``tinker://...``), as `open_policy` takes them; {} when there is none."""
        ...

    def open_policy(self, spec: Spec, policy: str | None, run_dir: RunDir | None,
                    work_dir: Path, *, in_flight: int | None = None) -> AbstractAsyncContextManager[PolicyHandle]:
        """`policy` as a sampler and tokenizer for `ctu eval`: one of `policies`' values (`run_dir` the run it is
        of), a checkpoint named by hand (e.g. ``tinker://...``; `run_dir` None), or None for the spec's own base
        model. What serves it (e.g. a local server) runs until the context exits and writes under `work_dir`, the
        evaluation's folder, unless it must serve from the run's own folder (a local Tinker run's checkpoints).
        `in_flight` is how many episodes the evaluation runs at once (what a server can batch), None when not said;
        added to the contract later, so a backend written without it registers with a deprecation warning and is
        called without it (`ctu.registry.contracts.adapt`).

        Raises:
            EvalError: the policy does not exist.
        """
        ...


registry.backends.declare_contract(Backend)


def backend_of(spec: Spec) -> Backend:
    """`spec`'s backend, built from its ``backend`` section.

    Raises:
        ComponentError: the backend is no longer registered.
    """
    from ctu.registry.config import ComponentConfig

    config = spec.backend
    return ComponentConfig[Backend](config.kind, config.type, config.params).build()


def run_backend(run_dir: RunDir) -> Backend:
    """The backend that wrote the run in `run_dir`, built from the run's own ``spec.resolved.yaml``, loaded as any
    spec is (`ctu.spec.load_spec`: its `imports` registered, entries that moved read from their old place).

    Raises:
        ComponentError: the folder holds no run's spec.
        SpecError: the run's spec no longer loads here (e.g. its `imports:` are gone, or its backend is not registered).
    """
    from ctu.errors import ComponentError
    from ctu.spec import load_spec

    if not run_dir.spec_file.exists():
        raise ComponentError(f"{run_dir.path} holds no run (no {run_dir.spec_file.name})")
    return backend_of(load_spec(run_dir.spec_file).spec)
