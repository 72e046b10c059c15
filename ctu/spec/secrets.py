"""Secrets a spec names: API keys are never in a spec, only the names of the environment variables that hold them,
in fields whose names end in ``_env`` (`ctu.components.endpoint.OpenAIEndpointParams.api_key_env`, the wandb
tracker's, the Tinker backend's).

A run reads their values where it starts (`secret_values`) and hands them, in memory, to the processes that call
the endpoints (on the `skyrl` backend, the Ray task that runs the rollouts: `ctu.runners.skyrl.experiment`); no
value is written to the run directory, a log or Ray's runtime environment (whose agent logs it on every node).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ctu.spec.models import Spec

SECRET_FIELD_SUFFIX = "_env"
"""A component field whose name ends so, holding a string, names an environment variable that holds a secret."""


def _named(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and key.endswith(SECRET_FIELD_SUFFIX) and isinstance(value, str) and value:
                yield value
            else:
                yield from _named(value)
    elif isinstance(data, list):
        for item in data:
            yield from _named(item)


def secret_variables(spec: Spec) -> list[str]:
    """The environment variables `spec` names as holding secrets (every ``*_env`` field set), sorted, each once."""
    return sorted(set(_named(spec.model_dump(mode="json"))))


def secret_values(spec: Spec) -> dict[str, str]:
    """The values of `secret_variables` set in this process's environment, by variable name (unset ones left out:
    where the value is read, the process's own environment then decides)."""
    return {name: os.environ[name] for name in secret_variables(spec) if os.environ.get(name)}
