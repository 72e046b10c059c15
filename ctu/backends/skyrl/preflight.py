"""Checks before a `skyrl` run starts Ray: the user simulator's and judges' endpoints answer, and, when the run
starts its own one-node cluster, the GPU packages import, CUDA sees GPUs and the spec's placement fits.

A failure here costs seconds; the same failure inside Ray costs the cluster's start-up and a stack trace from a
worker. A run that joins a cluster (`RAY_ADDRESS`) checks the GPU side on every node instead, in the workers'
own environment, once it has joined (`ctu.backends.skyrl.cluster.check_nodes`): the driver may be a CPU-only
head node. `ctu validate --deep` runs the checks that make sense on a machine without GPUs (which packages are
installed), as warnings.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from ctu.backends.skyrl.params import SkyRLParams
from ctu.components.endpoint import OpenAIEndpointParams, probe
from ctu.errors import CtuError
from ctu.spec import Spec

GPU_MODULES = ("vllm", "flash_attn")
"""Modules SkyRL's FSDP + vLLM path imports that only the `gpu` extra installs."""


def required_modules(engines_local: bool) -> tuple[str, ...]:
    """`GPU_MODULES` a run needs: SkyRL's trainer imports `flash_attn` always; `vllm` is needed only where SkyRL
    starts its own vLLM servers (not with external servers, `generator.inference_engine.external_*`)."""
    return GPU_MODULES if engines_local else tuple(name for name in GPU_MODULES if name != "vllm")
INSTALL_GPU = "install the GPU set: launch with `uv run --extra gpu ctu run SPEC` (or `uv sync --extra gpu` first)"


class PreflightError(CtuError):
    """A `skyrl` run cannot start on this machine or cluster; the message lists every reason and what to do."""


def raise_problems(where: str, problems: list[str]) -> None:
    """Raise a `PreflightError` listing `problems` (a line each) for `where` ("this machine", "this Ray
    cluster"); nothing when there are none."""
    if problems:
        raise PreflightError(f"the skyrl backend cannot start on {where}:\n" + "\n".join(f"  - {p}" for p in problems))


def gpus_needed(backend: SkyRLParams) -> int:
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


def import_error(name: str) -> str | None:
    """None if `name` imports, else why not."""
    try:
        importlib.import_module(name)
    except Exception as error:  # a broken CUDA library raises OSError, RuntimeError, ...
        return f"{type(error).__name__}: {error}"
    return None


def cuda_devices() -> int:
    """GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applies); 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def preflight_problems(backend: SkyRLParams, import_error: Callable[[str], str | None] = import_error,
                       cuda_devices: Callable[[], int] = cuda_devices, modules: tuple[str, ...] = GPU_MODULES) -> list[str]:
    """Every reason the spec's `skyrl` run cannot start on this machine alone, each with what to change; empty if
    none.

    Args:
        backend: the spec's backend section.
        import_error: why a module does not import (None if it does); imports it.
        cuda_devices: how many GPUs this process sees.
        modules: the GPU modules the run imports (`required_modules`).
    """
    problems = []
    for name in modules:
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


def spec_endpoints(spec: Spec) -> list[tuple[str, OpenAIEndpointParams]]:
    """The OpenAI-compatible endpoints a run calls besides the policy, by spec path: the user simulator's, the
    top-level judge's, each reward's own judge's and each user-fault detector's (an LLM reviewer's)."""
    configs: list[tuple[str, Any]] = [("environment.user_simulator", spec.environment.user_simulator), ("judge", spec.judge)]
    configs += [(f"rewards.{i}.judge", getattr(config.params, "judge", None)) for i, config in enumerate(spec.rewards)]
    configs += [(f"environment.user_faults.detectors.{i}", config)
                for i, config in enumerate(spec.environment.user_faults.detectors)]
    return [(path, config.params) for path, config in configs
            if config is not None and isinstance(config.params, OpenAIEndpointParams)]


def endpoint_problems(spec: Spec, check: Callable[[OpenAIEndpointParams], str | None] = probe,
                      passed: list[str] | None = None) -> list[str]:
    """One line per endpoint of `spec_endpoints` that does not answer (`ctu.components.endpoint.probe`), each
    endpoint probed once; a line per endpoint that does is added to `passed` when given."""
    problems, seen = [], set()
    for path, params in spec_endpoints(spec):
        if (params.base_url, params.api_key_env) in seen:
            continue
        seen.add((params.base_url, params.api_key_env))
        reason = check(params)
        if reason is not None:
            problems.append(f"{path}: {reason}")
        elif passed is not None:
            key = f" with the key in {params.api_key_env}" if params.api_key_env and os.environ.get(params.api_key_env) else ""
            passed.append(f"{path}: {params.base_url} answers{key}")
    return problems


def check_skyrl_run(spec: Spec, backend: SkyRLParams, joining: bool, modules: tuple[str, ...] = GPU_MODULES,
                    endpoints: bool = True) -> list[str]:
    """Every check that can run before Ray starts: `endpoint_problems` (when `endpoints`: an SFT run calls none),
    and `preflight_problems` when the run starts its own cluster on this machine (not `joining` one); returns a
    line per check that passed.

    Raises:
        PreflightError: listing every problem.
    """
    passed: list[str] = []
    problems = endpoint_problems(spec, passed=passed) if endpoints else []
    if not joining:
        gpu_problems = preflight_problems(backend, modules=modules)
        problems += gpu_problems
        if not gpu_problems:
            passed.append(f"this machine: {', '.join(modules) or 'no GPU module'} import; CUDA sees {cuda_devices()} GPU(s)")
    raise_problems("this machine", problems)
    return passed
