"""What a run prints: ctu's own lines and progress bars on the console; the libraries' logs (SkyRL's, vLLM's,
transformers', Ray's through SkyRL) in a log file of the run directory, shown live too with ``ctu run
--verbose``; no library's progress bar.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

PROGRESS_OFF = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
"""The variables that turn every library's progress bar off: tqdm's own (its ``TQDM_`` defaults: SkyRL's bars) and
Hugging Face's (hub downloads, transformers' weight loading and shard writing, datasets' maps and filters: they
pass tqdm ``disable`` themselves)."""

OWN_LOGGERS = ("ctu", "tau_bench_env")
"""The loggers whose lines are ctu's own: always on the console."""
DETACHED_LOGGERS = ("skyrl",)
"""Standard-library loggers that print to the console with handlers of their own instead of propagating (SkyRL's
``skyrl`` logger: a rich handler, `skyrl.utils.log`): given the log file instead."""

LOG_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"
"""The log file's line format (SkyRL's own, without its colours)."""


def silence_progress_bars() -> None:
    """Turn off every library's progress bars in this process and the processes it starts (`PROGRESS_OFF`; ctu's
    own are rich's); a `skyrl` run's Ray workers get the same (`ctu.runners.skyrl.cluster.runtime_env`)."""
    os.environ.update(PROGRESS_OFF)


def route_driver_logs(log_file: Path, verbose: bool) -> None:
    """In the process `ctu run` started: the standard-library logs of every library (vLLM's import-time warnings
    among them: ``VLLM_CONFIGURE_LOGGING=0`` unless set, so vLLM's records reach the root logger; SkyRL's own
    logger, `DETACHED_LOGGERS`) go to `log_file`, ctu's own (`OWN_LOGGERS`) to the console as well; with
    `verbose`, everything to the console too."""
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.handlers = [_file_handler(log_file), *([_console_handler()] if verbose else [])]
    root.setLevel(logging.INFO)
    _own_on_console(verbose)
    _detached_to(log_file, verbose)


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
    logger.add(sys.stderr, level="INFO" if verbose else "ERROR", colorize=False, enqueue=True, backtrace=False,
               diagnose=False, format=LOG_FORMAT)
    _own_on_console(verbose)  # verbose: through loguru's console sink, once
    _detached_to(log_file, verbose)


def _own_on_console(verbose: bool) -> None:
    """ctu's own loggers print on the console at INFO and above (through the root's handlers when `verbose`)."""
    for name in OWN_LOGGERS:
        own = logging.getLogger(name)
        own.setLevel(logging.INFO)
        own.handlers = [] if verbose else [_console_handler()]


def _detached_to(log_file: Path, verbose: bool) -> None:
    """`DETACHED_LOGGERS` write to `log_file` (and, with `verbose`, the console) instead of their own handlers."""
    for name in DETACHED_LOGGERS:
        detached = logging.getLogger(name)
        for old in detached.handlers:
            old.close()
        detached.handlers = [_file_handler(log_file), *([_console_handler()] if verbose else [])]
        detached.propagate = False


def _file_handler(log_file: Path) -> logging.Handler:
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-8s | %(name)s - %(message)s"))
    return handler


def _console_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    return handler


@contextlib.contextmanager
def own_log_file(path: Path) -> Iterator[Path]:
    """While open: ctu's own log records (`OWN_LOGGERS`), DEBUG and above (tracebacks of failed episodes among
    them), are appended to `path`; the console shows their warnings and errors as before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-8s | %(name)s - %(message)s"))
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
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
