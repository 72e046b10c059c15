"""The Ray runtime env of a `skyrl` run: the workers run in the driver's virtual environment, with the spec's own
variables and setup hook (the run itself: tests/runners/test_skyrl_cpu.py, under Ray's uv hook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.backends.skyrl.cluster import driver_environment, joining_cluster, runtime_env
from ctu.backends.skyrl.params import RayRuntimeEnv, SkyRLParams


def test_workers_launched_by_rays_uv_hook_get_the_drivers_environment_unsynced():
    assert sys.prefix != sys.base_prefix  # the tests run in the project's virtual environment
    assert driver_environment() == {"UV_PROJECT_ENVIRONMENT": sys.prefix, "UV_NO_SYNC": "1"}


def test_the_specs_variables_come_last_and_its_setup_hook_runs_after_ctus(tmp_path: Path):
    from skyrl.train.config import SkyRLTrainConfig

    backend = SkyRLParams(runtime_env=RayRuntimeEnv(env_vars={"NCCL_DEBUG": "INFO", "UV_NO_SYNC": "0"},
                                                     worker_process_setup_hook="my_pkg.setup.configure"))
    env = runtime_env(SkyRLTrainConfig(), backend, tmp_path / "skyrl.log")
    assert env["worker_process_setup_hook"] == "ctu.backends.skyrl.worker_setup.setup"
    assert env["env_vars"]["CTU_USER_WORKER_SETUP_HOOK"] == "my_pkg.setup.configure"
    assert env["env_vars"]["CTU_WORKER_LOG"] == str(tmp_path / "skyrl.log") and env["env_vars"]["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"
    assert env["env_vars"]["NCCL_DEBUG"] == "INFO" and env["env_vars"]["UV_NO_SYNC"] == "0"
    assert env["env_vars"]["UV_PROJECT_ENVIRONMENT"] == sys.prefix
    verbose = runtime_env(SkyRLTrainConfig(), SkyRLParams())  # the workers' output stays on the console
    assert verbose["worker_process_setup_hook"] == "ctu.backends.skyrl.worker_setup.setup"
    assert not {"CTU_WORKER_LOG", "CTU_USER_WORKER_SETUP_HOOK", "VLLM_LOGGING_STREAM"} & set(verbose["env_vars"])


WORKER = """
import logging, sys, warnings
from ctu.backends.skyrl.worker_setup import setup
setup()
print("a library's print", flush=True)
sys.stderr.write("a C++ library's line\\n"); sys.stderr.flush()
warnings.warn("a library's deprecation")
logging.getLogger("ctu.rollout").info("ctu's own line")
"""


def test_a_workers_standard_error_goes_to_the_log_and_ctus_lines_to_its_standard_output(tmp_path: Path):
    """ctu's setup hook in a worker process (as Ray starts one): the libraries' standard error is appended to the
    log file, ctu's own lines stay on the output Ray streams to the console, and the spec's hook runs after."""
    log = tmp_path / "logs" / "skyrl.log"
    (tmp_path / "user_hook.py").write_text("def configure():\n    print('the spec hook ran', flush=True)\n")
    env = {**os.environ, "CTU_WORKER_LOG": str(log), "CTU_USER_WORKER_SETUP_HOOK": "user_hook.configure",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == ["the spec hook ran", "a library's print", "INFO ctu's own line"]
    logged = log.read_text()
    assert "a C++ library's line" in logged and "a library's deprecation" in logged
    verbose = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in env.items() if k != "CTU_WORKER_LOG"})
    assert "a C++ library's line" in verbose.stderr and "the spec hook ran" in verbose.stdout


def test_a_run_joins_the_cluster_named_by_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not joining_cluster()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert joining_cluster()


def test_a_cluster_without_a_gpu_node_is_a_problem_named_not_a_crash():
    import ray

    from ctu.backends.skyrl.cluster import check_nodes

    ray.init(address="local", num_cpus=1, num_gpus=0, include_dashboard=False)  # this test's own cluster
    try:
        seen, [problem] = check_nodes(SkyRLParams(num_gpus_per_node=2), ("flash_attn",), timeout_s=60)
        separate = SkyRLParams(num_gpus_per_node=2, colocate_all=False, num_inference_engines=2)
        _, [separate_problem] = check_nodes(separate, ("flash_attn",), timeout_s=60)
    finally:
        ray.shutdown()
    assert seen == []
    assert "needs 1 node(s) with 2 GPU(s) each and the Ray cluster has 0 (GPUs per node: none)" in problem
    # not colocated, the inference engines' GPUs count too, as in the local check
    assert "needs 1 node(s) with 4 GPU(s) each (the trainer's and, not colocated" in separate_problem


def test_a_ray_address_where_nothing_answers_fails_within_seconds_naming_it():
    import socket
    import time

    from ctu.backends.skyrl.cluster import check_address
    from ctu.backends.skyrl.preflight import PreflightError
    from ctu.backends.tinker.server import free_port

    port = free_port()
    started = time.monotonic()
    with pytest.raises(PreflightError, match=rf"no Ray cluster answers at RAY_ADDRESS=127.0.0.1:{port} "):
        check_address(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_address(f"ray://127.0.0.1:{listening.getsockname()[1]}")  # something answers: Ray's to go on
    for resolved_by_ray in (None, "auto", "local"):
        check_address(resolved_by_ray)
