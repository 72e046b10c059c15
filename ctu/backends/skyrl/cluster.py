"""The Ray cluster of a `skyrl` run: the workers' environment, joining or starting the cluster, and the checks
that run on its nodes before SkyRL places anything.

**Ray's uv hook.** When the driver was started under ``uv run`` (as ``uv run ctu run SPEC`` is), Ray launches
every worker as ``uv run <the same uv flags> python`` in a copy of the working directory (Ray's
``uv_runtime_env_hook``). Left alone, that ``uv run`` builds a new virtual environment inside the copy from the
project's default dependencies: without the ``gpu`` extra, so `vllm` and `flash_attn` fail to import in the workers
while they import in the driver (and with the extra named, it would build flash-attn once per node). ctu hands the
workers ``UV_PROJECT_ENVIRONMENT`` (the driver's virtual environment) and ``UV_NO_SYNC=1``: the hook's ``uv run``
then starts the driver's own interpreter in its own environment, unchanged. On several nodes that environment must
exist at the same path on each (a shared filesystem or the same image); `check_nodes` checks it there.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ctu.backends.skyrl.params import SkyRLParams
from ctu.backends.skyrl.preflight import INSTALL_GPU, gpus_needed

if TYPE_CHECKING:
    from skyrl.train.config import SkyRLTrainConfig

NODE_CHECK_TIMEOUT_S = 600.0
"""How long the checks on the nodes may take (a node's first worker imports torch and vLLM)."""


def joining_cluster() -> bool:
    """Whether the run joins a running Ray cluster (``RAY_ADDRESS`` set, as Ray itself reads it) rather than
    starting a one-node cluster on this machine."""
    return bool(os.environ.get("RAY_ADDRESS"))


def driver_environment() -> dict[str, str]:
    """The variables that make a worker launched by Ray's uv hook run in this process's virtual environment
    (none when this process runs in no virtual environment); see the module's docstring."""
    if sys.prefix == sys.base_prefix:
        return {}
    return {"UV_PROJECT_ENVIRONMENT": sys.prefix, "UV_NO_SYNC": "1"}


class NodeReport(TypedDict):
    """What `node_report` finds on one node."""

    host: str
    python: str
    import_errors: dict[str, str]
    cuda_devices: int
    torch_cuda: str | None


def env_vars_of(env: dict[str, object]) -> dict[str, str]:
    """The ``env_vars`` of a Ray runtime env made by `runtime_env`."""
    found = env.get("env_vars")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

def runtime_env(config: SkyRLTrainConfig, backend: SkyRLParams, worker_log: Path | None = None) -> dict[str, object]:
    """Ray's job-wide runtime env for a run: SkyRL's own variables (`prepare_runtime_environment`), then
    `driver_environment` and the libraries' progress bars off (`ctu.runners.console.PROGRESS_OFF`: the workers'
    bars are SkyRL's and the libraries', not ctu's), then the spec's `backend.runtime_env` variables (last). Every
    worker starts in ctu's setup hook (`ctu.backends.skyrl.worker_setup`), which appends its standard error to
    `worker_log` (vLLM's logs written there too: ``VLLM_LOGGING_STREAM``; None: a verbose run, the workers' output
    stays on the console) and then calls the spec's own hook. Never a secret: Ray's runtime-env agent logs the
    whole env on every node (keys go to the entrypoint, `run_skyrl`)."""
    from skyrl.train.utils.utils import prepare_runtime_environment

    from ctu.backends.skyrl import worker_setup
    from ctu.runners.console import PROGRESS_OFF

    quiet = {} if worker_log is None else {worker_setup.LOG_ENV: str(worker_log), "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
    env_vars: dict[str, str] = {**prepare_runtime_environment(config), **driver_environment(), **PROGRESS_OFF, **quiet,
                                **backend.runtime_env.env_vars}
    if backend.runtime_env.worker_process_setup_hook:
        env_vars[worker_setup.USER_HOOK_ENV] = backend.runtime_env.worker_process_setup_hook
    return {"env_vars": env_vars, "worker_process_setup_hook": worker_setup.HOOK}


ADDRESS_TIMEOUT_S = 5.0
"""How long `check_address` waits for a TCP connection to a Ray cluster's address."""


def check_address(address: str | None, timeout_s: float = ADDRESS_TIMEOUT_S) -> None:
    """Fail fast when ``RAY_ADDRESS`` names a cluster that does not answer: Ray itself retries for minutes, its
    retries in the log file only. Checks ``host:port`` and ``ray://host:port`` forms by opening a TCP connection;
    None, ``auto`` and ``local`` are Ray's to resolve.

    Raises:
        PreflightError: nothing accepts a connection at the address within `timeout_s` seconds."""
    import socket

    from ctu.backends.skyrl.preflight import PreflightError

    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise PreflightError(f"no Ray cluster answers at RAY_ADDRESS={address} ({error}): start it there (`ray start "
                             "--head`), correct the address, or unset RAY_ADDRESS to start a cluster for the run") from None


def init_ray(config: SkyRLTrainConfig, backend: SkyRLParams, worker_log: Path | None = None) -> None:
    """Join the cluster at ``RAY_ADDRESS`` or start one on this machine, with `runtime_env` (the workers' standard
    error appended to `worker_log`, None: left on the console), then create SkyRL's named registry actors
    (`sync_registries`). As SkyRL's own `initialize_ray`, SkyRL's infrastructure logs go to
    ``<trainer.log_path>/infra-<time>.log`` unless ``SKYRL_DUMP_INFRA_LOG_TO_STDOUT=1`` (Ray's own C++ logs stay
    in its session's log folder: unlike SkyRL, ctu does not set ``RAY_BACKEND_LOG_LEVEL``, whose very setting is a
    line on the console). With `worker_log`, the job has Ray's logging config, so the workers' lines Ray streams
    to the console (ctu's own, `ctu.backends.skyrl.worker_setup`) carry no ``(task pid=...)`` prefix; it resets
    the root logger of this process, which `ctu.runners.console.route_driver_logs` sets again afterwards.

    Raises:
        PreflightError: ``RAY_ADDRESS`` names a cluster that does not answer (`check_address`)."""
    import ray
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries

    check_address(os.environ.get("RAY_ADDRESS"))
    env = runtime_env(config, backend, worker_log)
    if os.environ.get("SKYRL_DUMP_INFRA_LOG_TO_STDOUT") != "1":
        log_dir = Path(config.trainer.log_path).resolve()
        log_dir.mkdir(parents=True, exist_ok=True)
        log_file = str(log_dir / f"infra-{datetime.now():%y%m%d_%H%M%S}.log")
        os.environ["SKYRL_LOG_FILE"] = log_file
        env["env_vars"] = {**env_vars_of(env), "SKYRL_LOG_FILE": log_file}
    logging_config = ray.LoggingConfig(encoding="TEXT", log_level="INFO") if worker_log is not None else None
    ray.init(runtime_env=env, log_to_driver=True, logging_config=logging_config)
    sync_registries()


def node_report(modules: tuple[str, ...]) -> NodeReport:
    """What a Ray worker on one node sees (run there as a task): its interpreter, why each of `modules` does
    not import (absent when it does), how many CUDA devices torch can use, and the CUDA version torch is built for
    (None for a CPU build)."""
    import socket

    import torch

    from ctu.backends.skyrl import preflight

    errors = {name: error for name in modules if (error := preflight.import_error(name)) is not None}
    return {"host": socket.gethostname(), "python": sys.executable, "import_errors": errors,
            "cuda_devices": preflight.cuda_devices(), "torch_cuda": torch.version.cuda}


def check_nodes(backend: SkyRLParams, modules: tuple[str, ...],
                timeout_s: float = NODE_CHECK_TIMEOUT_S) -> tuple[list[str], list[str]]:
    """What each GPU node of the cluster Ray is connected to looks like from a worker (a line per node), and every
    reason the run cannot start there, each with what to do (empty if none).

    Ray's own node table gives the GPUs per node (enough nodes with `gpus_needed` each: the trainer's
    and, when not colocated, the inference engines' share, as the local check counts them); a task on
    each node with GPUs, in the job's runtime env (so in the environment SkyRL's workers get), checks that
    `modules` import and that CUDA sees a GPU there.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [node for node in ray.nodes() if node.get("Alive") and node["Resources"].get("GPU", 0) > 0]
    needed = gpus_needed(backend)
    fitting = [node for node in nodes if node["Resources"]["GPU"] >= needed]
    problems = []
    if len(fitting) < backend.num_nodes:
        counts = ", ".join(f"{node['NodeManagerAddress']}: {node['Resources']['GPU']:g}" for node in nodes) or "none"
        engines = "" if backend.colocate_all else " (the trainer's and, not colocated, the inference engines' share)"
        problems.append(f"the spec needs {backend.num_nodes} node(s) with {needed} GPU(s) each{engines} and the "
                        f"Ray cluster has {len(fitting)} (GPUs per node: {counts}): start Ray on more GPU nodes "
                        "(`ray start --address ...`) or lower backend.num_nodes / num_gpus_per_node")
    # a worker of its own that exits afterwards: `import vllm` changes the process (its environment variables, and
    # on GPUs a CUDA context), and Ray may hand an idle worker to one of SkyRL's actors
    check = ray.remote(max_calls=1)(node_report)
    refs = {node["NodeManagerAddress"]: check.options(
        num_cpus=0, num_gpus=0.01, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(modules)
        for node in nodes}
    ready = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)[0] if refs else []
    seen = []
    for address, ref in refs.items():
        if ref not in ready:
            problems.append(f"node {address}: the check did not finish within {timeout_s:.0f} s (are its GPUs all taken?)")
            ray.cancel(ref, force=True)
            continue
        report = ray.get(ref)
        where = f"node {address} ({report['host']}, Ray workers run {report['python']})"
        seen.append(f"{where}: {', '.join(m for m in modules if m not in report['import_errors']) or 'no GPU module'} "
                    f"import; CUDA sees {report['cuda_devices']} GPU(s)")
        problems += [f"{where}: `{name}` does not import ({error}): {INSTALL_GPU} in that environment"
                     for name, error in report["import_errors"].items()]
        if report["cuda_devices"] == 0:
            problems.append(f"{where}: CUDA sees no GPU in a Ray worker: check the NVIDIA driver (`nvidia-smi`): torch "
                            f"is built for CUDA {report['torch_cuda']}, whose driver must be recent enough (CUDA 13: >= 580)")
    return seen, problems
