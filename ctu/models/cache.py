"""ctu's cache of built models: where it is, and how a model is built into it once and atomically
(`ctu.models.builtin` names the models)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

Progress = Callable[[str, int, int], None]
"""A build's progress callback: ``(phase description, steps done, steps in the phase)``."""


def cache_dir() -> Path:
    """``$CTU_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctu``, else ``~/.cache/ctu``; absolute."""
    if os.environ.get("CTU_CACHE_DIR"):
        return Path(os.environ["CTU_CACHE_DIR"]).absolute()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return (base / "ctu").absolute()


def has_weights(folder: Path) -> bool:
    """Whether `folder` holds a finished model build: its weights (``model.safetensors``) are written last."""
    return (folder / "model.safetensors").exists()


def build_atomically(path: Path, complete: Callable[[Path], bool], fill: Callable[[Path], None]) -> Path:
    """`fill` a staging folder beside `path`, then rename it to `path`; returns `path`. Processes building the same
    `path` at once take turns on a file lock (``<path>.lock``); one that finds the folder built (`complete`) once it
    holds the lock builds nothing. A failed build leaves nothing behind."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if complete(path):
            return path
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
        try:
            fill(staging)
            shutil.rmtree(path, ignore_errors=True)  # an incomplete folder from an older ctu
            staging.rename(path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return path
