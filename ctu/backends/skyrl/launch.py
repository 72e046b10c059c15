"""A `skyrl` launch (GRPO and SFT alike): the run directory and its log file (`open_launch`), the Ray cluster joined
and its GPU nodes checked (`join_cluster`), and `run_skyrl`, which runs ctu's SkyRL experiment in a remote
entrypoint; the entrypoint registers the environment with skyrl-gym there (`ctu.backends.skyrl.gym_env`), since
registries filled by imports on the driver are empty in Ray workers (ctu's own registry fills itself from the
entry points at its first lookup, there as anywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ctu.backends.skyrl.checkpoints import latest_checkpoint_step, restart_finished_epoch
from ctu.backends.skyrl.config import prepare_data, resolve_skyrl_config
from ctu.backends.skyrl.params import SkyRLParams
from ctu.composition import build_components
from ctu.runners.rundir import RunDir, RunState
from ctu.spec import Spec

if TYPE_CHECKING:
    from skyrl.train.config import SkyRLTrainConfig


def join_cluster(config: SkyRLTrainConfig, backend: SkyRLParams, modules: tuple[str, ...], log_file: Path, verbose: bool) -> None:
    """Join (or start) the Ray cluster for a run whose SkyRL config is `config` (`cluster.init_ray`; Ray's
    connection and packaging lines to `log_file` unless `verbose`), after sweeping what killed runs left in
    ``/dev/shm``, then check every GPU node in the workers' own environment (`cluster.check_nodes`, a line printed
    per node).

    Raises:
        PreflightError: a node lacks `modules`, CUDA sees no GPU there, or the placement does not fit.
    """
    import contextlib

    from ctu.backends.skyrl.cluster import check_nodes, init_ray
    from ctu.backends.skyrl.preflight import raise_problems
    from ctu.runners.console import DETACHED_LOGGERS, DRIVER_DETACHED_LOGGERS, route_driver_logs, stderr_to
    from ctu.runners.watchdog import sweep_shared_memory

    sweep_shared_memory()  # what the run's killed processes leave in /dev/shm, once this process is gone
    with contextlib.nullcontext() if verbose else stderr_to(log_file):  # Ray's connection and packaging lines
        init_ray(config, backend, None if verbose else log_file)
    route_driver_logs(log_file, verbose, DETACHED_LOGGERS + DRIVER_DETACHED_LOGGERS)  # Ray's logging config reset them
    seen, problems = check_nodes(backend, modules)
    for line in seen:
        print(f"preflight: {line}", flush=True)
    raise_problems("this Ray cluster", problems)


def open_launch(run_dir: Path, resume: bool, verbose: bool) -> tuple[RunDir, Path, int | None]:
    """The start of a `skyrl` launch (GRPO or SFT): the run directory by absolute path (workers may run elsewhere,
    see `skyrl_overrides`), a new ``logs/skyrl-<time>.log`` that the driver's and the libraries' logs now go to
    (ctu's own lines stay on the console; Ray and torch imported first, their loggers then routed too), and the
    newest checkpoint's step when resuming (else None).

    Raises:
        RunError: `resume` with no checkpoint in `run_dir`.
    """
    from datetime import datetime

    import ray  # noqa: F401  (its loggers exist once it is imported, and are routed below)
    import torch  # noqa: F401  (its logger gets its handler on import)

    from ctu.runners.console import DETACHED_LOGGERS, DRIVER_DETACHED_LOGGERS, route_driver_logs, route_library_logs
    from ctu.runners.rundir import RunError

    run = RunDir(Path(run_dir).absolute())
    log_file = run.path / "logs" / f"skyrl-{datetime.now():%y%m%d_%H%M%S}.log"
    # before SkyRL's config imports vLLM, whose import warns; loguru is SkyRL's logger here too
    route_driver_logs(log_file, verbose, DETACHED_LOGGERS + DRIVER_DETACHED_LOGGERS)
    route_library_logs(log_file, verbose)
    resume_step = latest_checkpoint_step(run.path) if resume else None
    if resume and resume_step is None:
        raise RunError(f"{run.path} has no checkpoint to resume from")
    return run, log_file, resume_step


def run_skyrl(spec: Spec, backend: SkyRLParams, run_dir: Path, resume: bool = False, verbose: bool = False) -> RunState:
    """Launch `spec` through SkyRL on the Ray cluster at ``RAY_ADDRESS`` (or a one-node cluster started here),
    after the preflight checks; returns the final state.

    In order: SkyRL's config, the checks that need no cluster (`check_skyrl_run`), the datasets, Ray
    (`cluster.init_ray`, the workers in the driver's environment), the checks on every GPU node in the workers'
    own environment (`cluster.check_nodes`, a line printed per node), and only then the run directory's record of
    a started run: the resolved spec (with its hash and versions) and `state.json` (the backend and the newest
    checkpoint's step), as on the Tinker backend, so `ctu run --resume` and `--overwrite` work alike, and a run
    that never started leaves nothing a later `ctu run` would take for one. The API keys the spec names
    (`ctu.spec.secrets`) go from this process's environment to the Ray entrypoint as an argument, in memory,
    and the entrypoint probes the endpoints again from its node with them before anything else.

    Args:
        spec: a valid spec whose backend is `skyrl`.
        backend: the params the `skyrl` backend was built with (the spec's `backend` section).
        run_dir: the run directory.
        resume: continue from the newest checkpoint in `run_dir`; metric lines of later steps are dropped first.
        verbose: show SkyRL's and the libraries' logs on the console too; they always go to
            ``logs/skyrl-<time>.log`` in the run directory (its path printed once), ctu's own lines to the console.

    Raises:
        PreflightError: an endpoint does not answer or refuses the key (from this machine, or from the entrypoint's
            node), the GPU packages do not import (on this machine or a node),
            CUDA sees no GPU, or the placement does not fit.
        RunError: `resume` with no checkpoint in `run_dir`.
    """
    from ctu.backends.skyrl.cluster import joining_cluster
    from ctu.backends.skyrl.preflight import check_skyrl_run, required_modules

    run, log_file, resume_step = open_launch(run_dir, resume, verbose)
    data_dir = run.path / "data"
    components = build_components(spec)
    config = resolve_skyrl_config(spec, backend, data_dir, run.path, resume, components)
    engine = config.generator.inference_engine
    modules = required_modules(engine.run_engines_locally and not engine.external_proxy_url and not engine.external_server_urls)
    for line in check_skyrl_run(spec, backend, joining_cluster(), modules):
        print(f"preflight: {line}", flush=True)
    run.path.mkdir(parents=True, exist_ok=True)
    prepare_data(components, data_dir)
    join_cluster(config, backend, modules, log_file, verbose)
    run.write_spec(spec)
    run.write_state({"backend": spec.backend.type, "step": resume_step or 0})
    if resume_step is not None and restart_finished_epoch(run.path, resume_step, data_dir / "train.parquet",
                                                          spec.trainer.train_batch_size):
        print(f"resuming after step {resume_step}, the last batch of an epoch: the next epoch starts afresh (SkyRL "
              "says it found no dataloader state; ctu set it aside as data.pt.epoch_end)", flush=True)
    print(f"SkyRL's and the libraries' logs: {log_file}" + ("" if verbose else " (`ctu run --verbose` shows them here too)"),
          flush=True)
    return _run_entrypoint(config, spec, run, resume_step, log_file, verbose)


def _run_entrypoint(config: SkyRLTrainConfig, spec: Spec, run: RunDir, resume_step: int | None, log_file: Path, verbose: bool) -> RunState:
    """Run ctu's SkyRL experiment in its Ray entrypoint (the spec's secrets handed to it in memory) and wait for it;
    the run directory's state names the newest checkpoint whatever happened.

    Raises:
        CtuError: the entrypoint's own checks failed (raised as the error itself, not a remote traceback).
    """
    import ray

    from ctu.backends.skyrl.experiment import skyrl_entrypoint
    from ctu.errors import CtuError
    from ctu.spec.secrets import secret_values

    try:
        ray.get(skyrl_entrypoint.remote(config, spec.model_dump(mode="json"), str(run.path), resume_step, secret_values(spec),
                                        str(log_file), verbose))
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, CtuError):  # the entrypoint's own checks: a message, not a remote traceback
            raise error.cause from None
        raise
    finally:
        state: RunState = {"backend": spec.backend.type, "step": latest_checkpoint_step(run.path) or 0}
        run.write_state(state)
        run.plot_rewards()
    return state
