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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run `COLD_BUILD` first (the others keep their order)."""
    items.sort(key=lambda item: item.nodeid != COLD_BUILD)


@pytest.fixture
def minimal() -> dict[str, Any]:
    """A fresh deep copy of `MINIMAL_SPEC` to mutate."""
    return copy.deepcopy(MINIMAL_SPEC)
