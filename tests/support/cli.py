"""Running `ctu` as a user does, from tests."""

from __future__ import annotations

import os


def run_env() -> dict[str, str]:
    """The environment of a `ctu run` as a user's shell gives it. Without `WANDB_SERVICE`: an in-process wandb
    test earlier in the session leaves the pytest process's wandb service in that variable, and every child would
    share that one service, where a run killed by SIGKILL keeps its run id registered ("run ID ... is in use" on
    `--resume`). A user's run has a service of its own, which ends with it."""
    env = {**os.environ, "COLUMNS": "200", "WANDB_SILENT": "true"}
    for name in ("WANDB_API_KEY", "WANDB_SERVICE"):
        env.pop(name, None)
    return env
