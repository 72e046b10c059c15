"""User code a spec names in `imports:`: Python files (``my_rewards.py``) or module names (``my_pkg.parsers``),
imported so that their ``@registry.<kind>.register(...)`` decorators run before a spec is validated.

A file is imported under a module name made from its resolved path (``ctu_user_code.<stem>_<8 hex digits>``),
the same in every process that imports the same file, so objects pickled in one process (a Ray task's argument)
unpickle in another. Its folder goes on ``sys.path`` first, so the file may import its neighbours. Importing the
same file or module twice is a no-op.

Where the code is imported: every CLI command that reads a spec (`ctu validate`, `explain`, `run`, `components
--spec`), the commands that list components (`--import`), the Tinker runner (in the `ctu run` process), and
SkyRL's Ray entrypoint task, which validates the spec it is given again. File paths in a loaded spec are kept
relative to the directory ctu was started in when they lie under it: Ray runs its workers in that directory
(or, when the driver was started by ``uv run``, in the copy of it Ray ships to every node as the job's
``working_dir``), so the same relative path names the same file on every worker.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

__all__ = ["UserCodeError", "import_user_code", "is_file_import", "resolve_file_import"]

PACKAGE = "ctu_user_code"
"""The namespace under which imported files are registered in `sys.modules`."""

_lock = threading.RLock()


class UserCodeError(Exception):
    """An entry of `imports:` could not be imported; the message says which and why (the exception raised by the
    user's code, or the file that is missing)."""


def is_file_import(entry: str) -> bool:
    """True when `entry` names a file (ends in ``.py`` or contains a path separator), False for a module name."""
    return entry.endswith(".py") or "/" in entry or "\\" in entry


def resolve_file_import(entry: str, base_dir: Path, cwd: Path | None = None) -> str:
    """A file entry as a spec keeps it: resolved against `base_dir` (the folder of the spec that names it), then
    written relative to `cwd` (default: the current directory) when it lies under it, else absolute.

    Module names are returned unchanged.
    """
    if not is_file_import(entry):
        return entry
    path = (base_dir / entry).resolve()
    cwd = (cwd or Path.cwd()).resolve()
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def _module_name(path: Path) -> str:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem)
    return f"{PACKAGE}.{stem}_{digest}"


def _import_file(path: Path) -> ModuleType:
    name = _module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    if not path.is_file():
        raise UserCodeError(f"no such file: {path}" + ("" if path.suffix == ".py" else " (a file to import ends in .py)"))
    if PACKAGE not in sys.modules:
        package = ModuleType(PACKAGE)
        package.__path__ = []
        sys.modules[PACKAGE] = package
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def import_user_code(entry: str, base_dir: Path | None = None) -> ModuleType:
    """Import one `imports:` entry: a file (relative to `base_dir`, default the current directory) or a module.

    Returns:
        The imported module.

    Raises:
        UserCodeError: the file does not exist, the module is not found, or the code raised (or called
            ``sys.exit``) while being imported (the message names the entry and gives the exception's type and
            message, or the line that raised one without a message; the original exception is its ``__cause__``).
    """
    with _lock:
        try:
            if is_file_import(entry):
                return _import_file(((base_dir or Path.cwd()) / entry).resolve())
            return importlib.import_module(entry)
        except UserCodeError:
            raise
        except ModuleNotFoundError as exc:
            if exc.name is not None and entry.startswith(exc.name) and not is_file_import(entry):
                raise UserCodeError(f"no module named {exc.name!r} (install it, or name a .py file)") from exc
            raise UserCodeError(f"importing {entry!r} failed: {type(exc).__name__}: {exc}") from exc
        except (Exception, SystemExit) as exc:  # the user's code may raise anything (even exit); never a traceback
            raise UserCodeError(f"importing {entry!r} failed: {_why(exc)}") from exc


def _why(exc: BaseException) -> str:
    """An exception raised by user code as one line: its type and message, and the user's line that raised it
    when the message is empty (a bare ``assert``); a ``sys.exit()`` says so."""
    if isinstance(exc, SystemExit):
        return f"the code called sys.exit({'' if exc.code is None else repr(exc.code)}) while being imported"
    message = str(exc)
    if message:
        return f"{type(exc).__name__}: {message}"
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    where = f" at {last.filename}:{last.lineno} ({(last.line or '').strip()})" if last is not None else ""
    return f"{type(exc).__name__} without a message{where}"
