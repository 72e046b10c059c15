"""Run a callback on a module right after its first import, for what ctu changes at its edge in SkyRL's worker
processes: a module imported in a Ray worker's setup hook, before the worker is up, can crash Ray's core worker, so
such changes wait for the worker to import the module itself.

Imports nothing heavy.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that wraps module `name`'s loader once, so that `callback` runs on the module after it executed."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call `callback(module)` once module `name` is imported in this process (at once if it already is).

    Args:
        name: the module's dotted name.
        callback: called with the module object, after its code ran and before the importer sees it.
    """
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))
