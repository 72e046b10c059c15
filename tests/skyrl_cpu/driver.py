"""Run a spec through ctu's skyrl backend on CPU: SkyRL's real trainer (Ray, an FSDP2 policy worker on gloo,
ctu's `CtuPPOExp`), sampling from the vLLM stand-in at ``$CTU_STANDIN_URL``. Test support, never shipped.

Run: ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 python -m tests.skyrl_cpu.driver SPEC RUN_DIR [--resume] [key=value ...]``
with the venv's python (Ray's uv hook, on when any ancestor process is ``uv run``, would run workers in a copy of
the working directory).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.skyrl_cpu import shim


def cpu_ray(config: Any) -> None:
    """Ray for one CPU machine: logical GPUs for SkyRL's placement groups, `shim.install` in every worker."""
    import ray
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries
    from skyrl.train.utils.utils import prepare_runtime_environment

    env_vars = prepare_runtime_environment(config)
    env_vars.update({name: os.environ[name] for name in ("CTU_STANDIN_URL", "CTU_STANDIN_EXPORT", "CTU_CACHE_DIR") if name in os.environ})
    ray.init(num_cpus=6, num_gpus=1, include_dashboard=False, runtime_env=shim.ray_runtime_env(env_vars))
    sync_registries()


def main(argv: list[str]) -> None:
    from ctu.models.tiny_qwen3 import resolve
    from ctu.registry import populate_registry
    from ctu.runners.skyrl.config import run_skyrl
    from ctu.spec import load_spec

    resume = "--resume" in argv
    spec_path, run_dir, *overrides = [arg for arg in argv if arg != "--resume"]
    populate_registry()
    spec = load_spec(spec_path, overrides).spec
    resolve(spec.model.path)
    shim.install()
    run_skyrl(spec, Path(run_dir), resume=resume, init_ray=cpu_ray, preflight=False)


if __name__ == "__main__":
    main(sys.argv[1:])
