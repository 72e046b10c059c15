"""Importing tau2 quietly and offline.

tau2 logs every tool call at DEBUG through loguru and, through litellm, may try to fetch a model cost map from
the network when `tau2.registry` (or its LLM utilities) is imported. `prepare()` turns both off; every module
of this package calls it before importing tau2.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_prepared = False


def prepare() -> None:
    """Silence tau2's logging and keep litellm offline. Idempotent; call before any tau2 import.

    Sets (unless already set) ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (litellm reads its bundled cost map instead
    of downloading one) and disables loguru output from the ``tau2`` package.
    """
    global _prepared
    with _lock:
        if _prepared:
            return
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        from loguru import logger

        logger.disable("tau2")
        _prepared = True
