"""Checks before a `skyrl` run starts Ray: the GPU packages import, CUDA sees GPUs, and the spec's placement fits.

A failure here costs seconds; the same failure inside Ray costs the cluster's start-up and a stack trace from a
worker. `ctu run` runs every check; `ctu validate --deep` runs those that make sense on a machine without GPUs
(which packages are installed), as warnings.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from ctu.errors import CtuError
from ctu.spec.models import SkyRLBackend

GPU_MODULES = ("vllm", "flash_attn")
"""Modules SkyRL's FSDP + vLLM path imports that only the `gpu` extra installs."""
INSTALL_GPU = "install the GPU set with `uv sync --extra gpu`"


class PreflightError(CtuError):
    """A `skyrl` run cannot start on this machine; the message lists every reason and what to do."""


def gpus_needed(backend: SkyRLBackend) -> int:
    """GPUs the spec's placement takes on each node: the trainer's, plus the inference engines' when they are
    not colocated with it (engines x tensor-parallel size, spread over the nodes)."""
    if backend.colocate_all:
        return backend.num_gpus_per_node
    engines = backend.num_inference_engines * backend.inference_engine_tensor_parallel_size
    return backend.num_gpus_per_node + -(-engines // backend.num_nodes)


def missing_gpu_packages(importable: Callable[[str], bool] | None = None) -> list[str]:
    """`GPU_MODULES` that are not installed (found without importing them)."""
    found = importable or (lambda name: importlib.util.find_spec(name) is not None)
    return [name for name in GPU_MODULES if not found(name)]


def _imports(name: str) -> str | None:
    """None if `name` imports, else why not."""
    try:
        importlib.import_module(name)
    except Exception as error:  # a broken CUDA library raises OSError, RuntimeError, ...
        return f"{type(error).__name__}: {error}"
    return None


def _cuda_devices() -> int:
    """GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applies); 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def preflight_problems(backend: SkyRLBackend, import_error: Callable[[str], str | None] = _imports,
                       cuda_devices: Callable[[], int] = _cuda_devices) -> list[str]:
    """Every reason the spec's `skyrl` run cannot start here, each with what to change; empty if none.

    Args:
        backend: the spec's backend section.
        import_error: why a module does not import (None if it does); imports it.
        cuda_devices: how many GPUs this process sees.
    """
    problems = []
    for name in GPU_MODULES:
        error = import_error(name)
        if error is not None:
            problems.append(f"`{name}` does not import ({error}): {INSTALL_GPU}")
    visible, needed = cuda_devices(), gpus_needed(backend)
    if visible == 0:
        problems.append("CUDA sees no GPU: check the NVIDIA driver (`nvidia-smi`) and CUDA_VISIBLE_DEVICES. On a "
                        "machine without GPUs, run the spec small with `ctu run SPEC --smoke` (the CPU main job: "
                        "`ctu run specs/smoke.yaml`), or inspect the SkyRL config with `ctu run SPEC --dry-run`")
    elif backend.num_nodes == 1 and visible < needed:
        layout = (f"backend.num_gpus_per_node={backend.num_gpus_per_node}" if backend.colocate_all else
                  f"backend.num_gpus_per_node={backend.num_gpus_per_node} for the trainer plus "
                  f"{backend.num_inference_engines} engine(s) x tensor-parallel {backend.inference_engine_tensor_parallel_size}")
        problems.append(f"the spec's placement needs {needed} GPU(s) on this node ({layout}) and CUDA sees {visible}: "
                        "lower those numbers or set backend.colocate_all: true")
    return problems


def check_skyrl_run(backend: SkyRLBackend) -> None:
    """Run `preflight_problems`.

    Raises:
        PreflightError: listing every problem.
    """
    problems = preflight_problems(backend)
    if problems:
        raise PreflightError("the skyrl backend cannot start on this machine:\n" + "\n".join(f"  - {p}" for p in problems))
