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


@pytest.fixture
def minimal() -> dict[str, Any]:
    """A fresh deep copy of `MINIMAL_SPEC` to mutate."""
    return copy.deepcopy(MINIMAL_SPEC)
