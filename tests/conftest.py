"""Shared helpers: the repository root and a minimal valid spec."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.yaml"))

MINIMAL_SPEC: dict[str, Any] = {
    "experiment": {"name": "minimal"},
    "model": {"path": "Qwen/Qwen2.5-3B-Instruct"},
    "data": {"train": [{"domain": "retail", "split": "train"}], "test_sets": {"retail": {"domain": "retail", "split": "test"}}},
    "environment": {"user_simulator": {"type": "scripted"}},
    "backend": {"type": "tinker", "local": True},
    "algorithm": {"use_kl_loss": False},
    "trainer": {"train_batch_size": 2, "policy_mini_batch_size": 2},  # 74 training tasks: none left out
}
"""The smallest valid spec: everything else takes its default."""


COLD_BUILD = "tests/models/test_tiny_qwen3.py::test_the_model_builds_inside_a_running_event_loop_and_samples_agent_turns"
"""The built-in model's cold-build test: the first test of a session, so that a session whose cache starts empty
(CI's) builds the model there, once. Later in the session it would find the model the first test that needed it
had built, and build another into a cache of its own (about a minute on two cores)."""


MACHINE_WIDE = (
    "tests/runners/test_skyrl_cpu.py",
    "tests/runners/test_skyrl_real_model.py",
    "tests/runners/test_smoke_run.py::test_the_cpu_recipe_runs_end_to_end_as_its_commands_say",
    "tests/runners/test_skyrl_cluster.py::test_a_cluster_without_a_gpu_node_is_a_problem_named_not_a_crash",
    "tests/runners/test_watchdog.py::test_what_a_runs_killed_processes_leave_in_dev_shm_is_removed_once_the_run_is_gone_and_nothing_else",
)
"""Tests (node id prefixes) that start a Ray cluster or SkyRL's processes (vLLM's engine, a /dev/shm sweeper), or
look at the machine's processes or /dev/shm: under pytest-xdist they form one group, run one after another on one
worker, so that none sees another's processes, shared memory or Ray cluster."""

FIRST_GROUPS = ("tests/models/test_tiny_qwen3.py", "tests/env/test_gold_replay.py", "machine-wide",
                "tests/runners/test_smoke_run.py", "tests/runners/test_step_wise_run.py")
"""The xdist groups handed out first, in this order: the cold build's module to the first worker and the gold
replays, which need no model, to the second (no test builds the model while the cold build does), then the longest
(the last CI's `--durations`), so that no long one is left for last."""


def xdist_group(nodeid: str) -> str:
    """The group of the test `nodeid` under pytest-xdist: "machine-wide" for those of `MACHINE_WIDE`, else its
    module, so that a module's fixtures (one run shared by its tests) run once, on one worker."""
    return "machine-wide" if nodeid.startswith(MACHINE_WIDE) else nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run `COLD_BUILD` first, then the groups of `FIRST_GROUPS` in that order (the others keep theirs).

    Raises:
        pytest.UsageError: a `MACHINE_WIDE` entry names no collected test of a collected module (a renamed test).
    """
    modules = {item.nodeid.split("::", 1)[0]: getattr(item, "module", None) for item in items}
    lost = [prefix for prefix in MACHINE_WIDE if not (REPO / prefix.split("::", 1)[0]).is_file()
            or ("::" in prefix and prefix.split("::", 1)[0] in modules
                and not hasattr(modules[prefix.split("::", 1)[0]], prefix.split("::", 1)[1]))]
    if lost:  # renamed: they would run beside the others unnoticed
        raise pytest.UsageError(f"tests/conftest.py's MACHINE_WIDE names tests that do not exist: {lost}")
    first = {group: rank for rank, group in enumerate(FIRST_GROUPS)}
    items.sort(key=lambda item: (item.nodeid != COLD_BUILD, first.get(xdist_group(item.nodeid), len(first))))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (README.md's test command): pytest-xdist's scheduling by module, with `MACHINE_WIDE`'s
    tests one group of their own and the groups handed out in collection order. (Its `loadgroup` with
    `xdist_group` marks would say this, but on pytest 9.2 it silently groups nothing: pytest-xdist#1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Grouped(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False  # keep `pytest_collection_modifyitems`'s order
    return Grouped(config, log)


@pytest.fixture
def minimal() -> dict[str, Any]:
    """A fresh deep copy of `MINIMAL_SPEC` to mutate."""
    return copy.deepcopy(MINIMAL_SPEC)
