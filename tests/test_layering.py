"""The package layering the README's Layout promises, read from the source's import statements (lazy imports
inside functions included)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent


def _package(module: str) -> str | None:
    """`ctu.<sub>` for ctu's modules (`ctu` for its top-level ones), `tau_bench_env` for the environment."""
    parts = module.split(".")
    if parts[0] == "tau_bench_env":
        return "tau_bench_env"
    if parts[0] != "ctu":
        return None
    return "ctu" if len(parts) == 1 else f"ctu.{parts[1]}"


def _import_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the files importing it."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted([*ROOT.glob("ctu/**/*.py"), *ROOT.glob("tau_bench_env/**/*.py")]):
        relative = path.relative_to(ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        source = _package(".".join(parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                target = _package(name)
                if target is not None and source is not None and target != source:
                    graph[source][target].append(str(path.relative_to(ROOT)))
    return graph


def test_the_environment_imports_nothing_from_ctu() -> None:
    graph = _import_graph()
    assert not {k: v for k, v in graph["tau_bench_env"].items() if k.startswith("ctu")}


def test_components_do_not_import_the_rollout_layer_or_the_runners() -> None:
    graph = _import_graph()
    upward = {"ctu.rollout", "ctu.runners", "ctu.evaluation", "ctu.composition", "ctu.cli"}
    for lower in ("ctu.components", "ctu.registry", "ctu.spec", "ctu.metrics", "ctu.errors"):
        assert not {k: v for k, v in graph[lower].items() if k in upward}, lower


def test_no_backend_neutral_layer_imports_a_backend() -> None:
    """The built-in backends sit on top: the backend-neutral layers (the runners' commands and shared parts, the
    evaluation, the rollout, the components, the registry and the spec) reach a backend only through the registry."""
    graph = _import_graph()
    for lower in ("ctu.runners", "ctu.evaluation", "ctu.rollout", "ctu.components", "ctu.registry", "ctu.spec",
                  "ctu.composition", "ctu.tasks", "ctu.sft", "ctu.view", "ctu.models", "tau_bench_env"):
        assert "ctu.backends" not in graph[lower], (lower, graph[lower].get("ctu.backends"))


def test_no_cycle_between_packages() -> None:
    graph = _import_graph()
    assert cycles({package: set(imported) for package, imported in graph.items()}) == []


TRAINERS = frozenset({"skyrl", "skyrl_gym", "tinker", "ray", "torch", "vllm"})
"""Modules of a trainer, its cluster or its sampler: only the backend folders and the runners that need them import
these."""
GROUND_FLOORS = ("tau_bench_env", "ctu/spec", "ctu/rollout")
"""The floors every backend stands on: the environment, the spec and the rollout."""


def test_the_ground_floors_name_no_trainer() -> None:
    """The environment, the spec layer and ctu's rollout (its contract, the agent loop, its records) name no
    trainer's module, lazily or not: SkyRL's types stay in its backend's adapters (`ctu/backends/skyrl/generator.py`,
    `gym_env.py`, `keys.py`)."""
    found = []
    for floor in GROUND_FLOORS:
        for path in sorted(ROOT.glob(f"{floor}/**/*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                found += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in TRAINERS]
    assert not found


def test_importing_the_ground_floors_loads_no_trainer() -> None:
    """Every module of `tau_bench_env`, `ctu.spec` and `ctu.rollout` imported in a fresh interpreter: none of them
    (nor what they import: tau2, the components, the registry's entry points) loads a trainer's module."""
    import subprocess
    import sys

    script = (
        "import importlib, pkgutil, sys\n"
        "for name in ('tau_bench_env', 'ctu.spec', 'ctu.rollout'):\n"
        "    package = importlib.import_module(name)\n"
        "    for found in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        importlib.import_module(found.name)\n"
        "from ctu.registry import registry\n"
        "registry.domains.get('retail')\n"  # the entry points of every kind, loaded
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(TRAINERS)!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
