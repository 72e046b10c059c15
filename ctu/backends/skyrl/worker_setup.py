"""Every Ray worker of a `skyrl` run starts here (Ray's ``worker_process_setup_hook``), before it imports anything
of the run: the libraries' output goes to the run's log file, ctu's own lines to the console; ctu's fix of
tied word embeddings is put in place for when the worker imports SkyRL's FSDP strategy
(`ctu.backends.skyrl.tied_embeddings`); then the spec's own setup hook runs.

A worker's standard output and error reach the driver's console through Ray's log streaming. Unless the run is
verbose (``ctu run --verbose``), `setup` points the worker's standard error (file descriptor 2: Python's warnings,
loguru's default sink, torch's logger, vLLM's with ``VLLM_LOGGING_STREAM=ext://sys.stderr`` in the workers'
environment, C++ libraries) at the file named by ``CTU_WORKER_LOG``, appended to (`ctu.runners.console.route_stderr`);
ctu's own loggers print on standard output instead, which Ray still streams to the driver. On a node that cannot
open that path (a cluster without a shared filesystem holding the run directory), the worker's output stays as
Ray has it.

This module imports nothing heavy: it runs in every worker process, first.
"""

from __future__ import annotations

import importlib
import os

LOG_ENV = "CTU_WORKER_LOG"
"""The variable naming the log file that the workers' standard error is appended to (unset: verbose)."""
USER_HOOK_ENV = "CTU_USER_WORKER_SETUP_HOOK"
"""The variable naming the spec's own setup hook (``backend.runtime_env.worker_process_setup_hook``), called
after ctu's."""
HOOK = f"{__name__}.setup"
"""This module's hook, as Ray's runtime env names it."""


def setup() -> None:
    """Route this worker's output, install the tied-embedding fix (see the module docstring), then call the spec's
    own hook, if any.

    Raises:
        ImportError, AttributeError: the spec's hook names no importable function (Ray then fails the worker's
            start, as it would for that hook alone).
    """
    log_file = os.environ.get(LOG_ENV)
    if log_file:
        from ctu.runners.console import route_stderr

        route_stderr(log_file)
    from ctu.backends.skyrl import tied_embeddings

    tied_embeddings.install()
    user_hook = os.environ.get(USER_HOOK_ENV)
    if user_hook:
        module, _, function = user_hook.rpartition(".")
        getattr(importlib.import_module(module), function)()
