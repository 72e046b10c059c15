"""The Ray runtime env of a `skyrl` run: the workers run in the driver's virtual environment, with the spec's own
variables and setup hook (the run itself: tests/runners/test_skyrl_cpu.py, under Ray's uv hook)."""

from __future__ import annotations

import sys

from ctu.runners.skyrl.cluster import driver_environment, joining_cluster, runtime_env
from ctu.runners.skyrl.params import RayRuntimeEnv, SkyRLParams


def test_workers_launched_by_rays_uv_hook_get_the_drivers_environment_unsynced():
    assert sys.prefix != sys.base_prefix  # the tests run in the project's virtual environment
    assert driver_environment() == {"UV_PROJECT_ENVIRONMENT": sys.prefix, "UV_NO_SYNC": "1"}


def test_the_specs_variables_come_last_and_its_setup_hook_is_rays():
    from skyrl.train.config import SkyRLTrainConfig

    backend = SkyRLParams(runtime_env=RayRuntimeEnv(env_vars={"NCCL_DEBUG": "INFO", "UV_NO_SYNC": "0"},
                                                     worker_process_setup_hook="my_pkg.setup.configure"))
    env = runtime_env(SkyRLTrainConfig(), backend)
    assert env["worker_process_setup_hook"] == "my_pkg.setup.configure"
    assert env["env_vars"]["NCCL_DEBUG"] == "INFO" and env["env_vars"]["UV_NO_SYNC"] == "0"
    assert env["env_vars"]["UV_PROJECT_ENVIRONMENT"] == sys.prefix
    assert "worker_process_setup_hook" not in runtime_env(SkyRLTrainConfig(), SkyRLParams())


def test_a_run_joins_the_cluster_named_by_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not joining_cluster()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert joining_cluster()


def test_a_cluster_without_a_gpu_node_is_a_problem_named_not_a_crash():
    import ray

    from ctu.runners.skyrl.cluster import check_nodes

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
