"""What a run prints: ctu's own lines and progress bars on the console; the libraries' logs (SkyRL's, vLLM's,
transformers', Ray's through SkyRL) in a log file of the run directory, shown live too with ``ctu run
--verbose``; no library's progress bar.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from ctu.redaction import scrub

PROGRESS_OFF = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
"""The variables that turn every library's progress bar off: tqdm's own (its ``TQDM_`` defaults: SkyRL's bars) and
Hugging Face's (hub downloads, transformers' weight loading and shard writing, datasets' maps and filters: they
pass tqdm ``disable`` themselves)."""

OWN_LOGGERS = ("ctu", "tau_bench_env")
"""The loggers whose lines are ctu's own: always on the console."""
DETACHED_LOGGERS = ("skyrl",)
"""Standard-library loggers that print to the console with handlers of their own instead of propagating (SkyRL's
``skyrl`` logger: a rich handler, `skyrl.utils.log`): given the log file instead."""
DRIVER_DETACHED_LOGGERS = ("ray", "torch")
"""More such loggers in a `skyrl` run's driver, once their libraries are imported: Ray's (its client's connection
and working-directory packaging lines) and torch's (``No CUDA runtime is found`` on a CPU node)."""

_stderr_routed = False
"""Whether this process's standard error goes to a log file (`route_stderr`): ctu's console is then stdout."""

LOG_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"
"""The log file's line format (SkyRL's own, without its colours)."""


def silence_progress_bars() -> None:
    """Turn off every library's progress bars in this process and the processes it starts (`PROGRESS_OFF`; ctu's
    own are rich's); a `skyrl` run's Ray workers get the same (`ctu.backends.skyrl.cluster.runtime_env`)."""
    os.environ.update(PROGRESS_OFF)


def route_driver_logs(log_file: Path, verbose: bool, detached: tuple[str, ...] = DETACHED_LOGGERS) -> None:
    """In the process `ctu run` started: the standard-library logs of every library (vLLM's import-time warnings
    among them: ``VLLM_CONFIGURE_LOGGING=0`` unless set, so vLLM's records reach the root logger; the loggers with
    handlers of their own named in `detached`) go to `log_file`, ctu's own (`OWN_LOGGERS`) to the console as
    well; with `verbose`, everything to the console too. Safe to call again (after an import that gave a detached
    logger its handlers)."""
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers = [_file_handler(log_file), *([_console_handler()] if verbose else [])]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # Python's warnings (a library's deprecation) are records of the root logger
    _own_on_console(verbose)
    _detached_to(log_file, verbose, detached)


def route_stderr(log_file: str) -> bool:
    """Point this process's standard error (file descriptor 2: what C++ libraries, Python's warnings and loguru's
    default sink write) at `log_file`, appended to and created with its folder, for good; ctu's console is then
    standard output (`_console_handler`). False, changing nothing, when the file cannot be opened (a node that does
    not hold the run directory). For a process that prints nothing of ctu's to its standard error again (a Ray
    worker: `ctu.backends.skyrl.worker_setup`)."""
    global _stderr_routed
    saved = _swap_stderr(log_file)
    if saved is None:
        return False
    os.close(saved)
    _stderr_routed = True
    _own_on_console(verbose=False)
    return True


@contextlib.contextmanager
def stderr_to(log_file: Path) -> Iterator[None]:
    """While open, this process's standard error (file descriptor 2) is appended to `log_file`: for a call that
    writes to it through handlers of its own (`ray.init` with a logging config); restored afterwards.

    Raises:
        OSError: `log_file` cannot be opened.
    """
    saved = _swap_stderr(str(log_file))
    if saved is None:
        raise OSError(f"cannot append to {log_file}")
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _swap_stderr(log_file: str) -> int | None:
    """Point file descriptor 2 at `log_file` (appended to); a duplicate of what it pointed at before, or None,
    changing nothing, when the file cannot be opened."""
    try:
        os.makedirs(os.path.dirname(log_file) or ".", exist_ok=True)
        fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return None
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


def route_library_logs(log_file: Path, verbose: bool) -> None:
    """In a process that runs SkyRL's trainer: SkyRL's loguru logger, and the standard-library records SkyRL routes
    into it (`skyrl.train.utils.utils.configure_ray_worker_logging`: vLLM's, transformers', Ray's), go to
    `log_file` (appended to); the console (stderr) keeps ctu's own loggers (`OWN_LOGGERS`) at INFO and above, and
    errors from anyone; SkyRL's own standard-library logger (`DETACHED_LOGGERS`) goes to `log_file` too. With
    `verbose`, everything goes to the console as well. Safe to call again (SkyRL's trainer sets its console sink
    up anew when it is built)."""
    from loguru import logger

    log_file.parent.mkdir(parents=True, exist_ok=True)
    logger.remove()
    logger.add(log_file, level="INFO", colorize=False, enqueue=True, backtrace=False, diagnose=False, format=LOG_FORMAT)
    logger.add(_console_stream(), level="INFO" if verbose else "ERROR", colorize=False, enqueue=True, backtrace=False,
               diagnose=False, format=LOG_FORMAT)
    _own_on_console(verbose)  # verbose: through loguru's console sink, once
    _detached_to(log_file, verbose)


def _own_on_console(verbose: bool) -> None:
    """ctu's own loggers print on the console at INFO and above (through the root's handlers when `verbose`)."""
    for name in OWN_LOGGERS:
        own = logging.getLogger(name)
        own.setLevel(logging.INFO)
        own.handlers = [] if verbose else [_console_handler()]


def _detached_to(log_file: Path, verbose: bool, names: tuple[str, ...] = DETACHED_LOGGERS) -> None:
    """The loggers `names` write to `log_file` (and, with `verbose`, the console) instead of their own handlers."""
    for name in names:
        detached = logging.getLogger(name)
        for old in detached.handlers:
            old.close()
        detached.handlers = [_file_handler(log_file), *([_console_handler()] if verbose else [])]
        detached.propagate = False


class ScrubbingFormatter(logging.Formatter):
    """A log line as `logging.Formatter` writes it, traceback included, with every remembered secret scrubbed
    (`ctu.redaction.scrub`): a library that logs a request's headers or an error body writes no key."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def _file_handler(log_file: Path) -> logging.Handler:
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(ScrubbingFormatter("%(asctime)s | %(levelname)-8s | %(name)s - %(message)s"))
    return handler


def _console_stream() -> TextIO:
    """The console of this process: standard error, or standard output once standard error goes to a log file."""
    return sys.stdout if _stderr_routed else sys.stderr


def _console_handler() -> logging.Handler:
    handler = logging.StreamHandler(_console_stream())
    handler.setFormatter(ScrubbingFormatter("%(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    return handler


@contextlib.contextmanager
def own_log_file(path: Path) -> Iterator[Path]:
    """While open: ctu's own log records (`OWN_LOGGERS`), DEBUG and above (tracebacks of failed episodes among
    them), are appended to `path`; the console shows their warnings and errors as before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(ScrubbingFormatter("%(asctime)s | %(levelname)-8s | %(name)s - %(message)s"))
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(ScrubbingFormatter("%(levelname)s %(message)s"))
    console.setLevel(logging.WARNING)
    saved = [(logger, logger.level, list(logger.handlers), logger.propagate)
             for logger in (logging.getLogger(name) for name in OWN_LOGGERS)]
    for logger, _, handlers, _ in saved:
        logger.setLevel(logging.DEBUG)
        logger.handlers = [*handlers, handler] if handlers else [handler, console]
        logger.propagate = bool(handlers) and logger.propagate
    try:
        yield path
    finally:
        for logger, level, handlers, propagate in saved:
            logger.setLevel(level)
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()


@contextlib.contextmanager
def step_bars(show: bool, label: str, total: int, done: int) -> Iterator[tuple[Callable[[], None], Callable[[int, bool], None] | None]]:
    """Yields ``(advance_step, on_episode)``: rich bars over a run's `total` steps (`label`, `done` of them done)
    and each batch's episodes (``on_episode(batch_size, False)`` starts a batch, ``(_, True)`` counts an episode);
    with `show` false, nothing is drawn (``on_episode`` None)."""
    if not show:
        yield (lambda: None), None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        steps = bar.add_task(label, total=total, completed=done)
        episodes = bar.add_task("episodes", total=0)

        def on_episode(batch: int, finished: bool) -> None:
            if finished:
                bar.advance(episodes)
            else:
                bar.reset(episodes, total=batch)

        yield (lambda: bar.advance(steps)), on_episode
