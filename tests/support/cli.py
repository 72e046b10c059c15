"""Running `ctu` as a user does, from tests."""

from __future__ import annotations

import os
import subprocess


def run_env() -> dict[str, str]:
    """The environment of a `ctu run` as a user's shell gives it. Without `WANDB_SERVICE`: an in-process wandb
    test earlier in the session leaves the pytest process's wandb service in that variable, and every child would
    share that one service, where a run killed by SIGKILL keeps its run id registered ("run ID ... is in use" on
    `--resume`). A user's run has a service of its own, which ends with it."""
    env = {**os.environ, "COLUMNS": "200", "WANDB_SILENT": "true"}
    for name in ("WANDB_API_KEY", "WANDB_SERVICE"):
        env.pop(name, None)
    return env


def ctu_here(*args: str) -> subprocess.CompletedProcess[str]:
    """`ctu ARGS` run in this process by typer's `CliRunner`: the exit code, stdout and stderr a subprocess gives,
    without its ~2 s start-up. Relative paths are the test process's (use absolute ones); an exception no command
    handles is exit 1 with the exception in stderr, where the console script would name a traceback file."""
    from typer.testing import CliRunner

    from ctu.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    stderr = result.stderr + (f"\n{type(result.exception).__name__}: {result.exception}"
                              if result.exception is not None and not isinstance(result.exception, SystemExit) else "")
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, stderr)
