"""The checks `ctu run` makes before a `skyrl` run starts Ray, and the GPU install they point to."""

from __future__ import annotations

import tomllib

import pytest

from ctu.runners.skyrl.preflight import (
    GPU_MODULES,
    PreflightError,
    check_skyrl_run,
    gpus_needed,
    missing_gpu_packages,
    preflight_problems,
)
from ctu.spec.models import SkyRLBackend

from ..conftest import REPO


def imports_all(name: str) -> None:
    return None


def test_a_machine_without_the_gpu_set_or_gpus_gets_every_reason_and_what_to_do():
    problems = preflight_problems(SkyRLBackend(), import_error=lambda name: f"ModuleNotFoundError: No module named '{name}'",
                                  cuda_devices=lambda: 0)
    assert len(problems) == 3
    assert all("uv sync --extra gpu" in p for p in problems[:2]) and "`vllm`" in problems[0] and "`flash_attn`" in problems[1]
    assert "CUDA sees no GPU" in problems[2] and "--smoke" in problems[2]


def test_this_cpu_machine_fails_the_preflight_at_once():
    with pytest.raises(PreflightError, match="CUDA sees no GPU"):
        check_skyrl_run(SkyRLBackend())


@pytest.mark.parametrize(("backend", "needed"), [
    (SkyRLBackend(num_gpus_per_node=4, colocate_all=True, num_inference_engines=4), 4),
    (SkyRLBackend(num_gpus_per_node=4, colocate_all=False, num_inference_engines=2, inference_engine_tensor_parallel_size=2), 8),
    (SkyRLBackend(num_nodes=2, num_gpus_per_node=4, colocate_all=False, num_inference_engines=3), 6),
])
def test_gpus_needed_per_node(backend: SkyRLBackend, needed: int):
    assert gpus_needed(backend) == needed


def test_a_placement_larger_than_the_node_names_the_fields_to_change():
    backend = SkyRLBackend(num_gpus_per_node=4, colocate_all=False, num_inference_engines=4)
    problems = preflight_problems(backend, import_error=imports_all, cuda_devices=lambda: 4)
    assert problems == [problems[0]] and "needs 8 GPU(s)" in problems[0] and "CUDA sees 4" in problems[0]
    assert "backend.num_gpus_per_node=4" in problems[0] and "colocate_all" in problems[0]
    assert preflight_problems(backend, import_error=imports_all, cuda_devices=lambda: 8) == []


def test_missing_gpu_packages_are_found_without_importing_them():
    assert missing_gpu_packages(lambda name: name != "vllm") == ["vllm"]
    assert set(missing_gpu_packages()) <= set(GPU_MODULES)


def test_the_gpu_extra_pins_what_skyrl_imports_and_the_cpu_set_stays_without_it():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    gpu = " ".join(project["project"]["optional-dependencies"]["gpu"])
    assert "vllm==" in gpu and "flash-attn==" in gpu and "torch==" in gpu
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    ctu = next(p for p in lock["package"] if p["name"] == "ctu")
    assert {d["name"] for d in ctu["optional-dependencies"]["gpu"]} >= {"vllm", "flash-attn", "torch"}
    assert "flash-attn" not in {d["name"] for d in ctu["dependencies"]}
    assert lock["manifest"]["overrides"] == [{"name": "flash-attn", "marker": "extra == 'gpu'", "specifier": "==2.8.3"}]
