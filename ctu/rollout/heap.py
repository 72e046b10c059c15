"""Keep the garbage collector off what existed before a batch of rollouts.

A training process holds about a million objects tracked by Python's cyclic garbage collector (torch,
transformers, tau2, the tokenizer) before its first rollout. A batch of hundreds of episodes allocates fast
enough to trigger collections every few milliseconds, and each older-generation collection walks all of them:
measured on the rollout concurrency benchmark (256 episodes), 0.69 s of 2.29 s of CPU went to the collector.
`frozen_heap` moves every object alive at the start of a batch into the permanent generation (`gc.freeze`,
https://docs.python.org/3/library/gc.html#gc.freeze) for the batch and gives them back at its end
(`gc.unfreeze`), so collections during rollouts walk only what the rollouts allocated, and nothing that
dies later is kept from the collector. (`gc.unfreeze` also returns objects frozen earlier by anyone else, such
as the few hundred the interpreter freezes at start-up; they are then collected as usual.)
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the collector's view of the heap for the duration of the block (re-entrant: the heap is
    unfrozen when the outermost block ends)."""
    global _depth
    with _lock:
        if _depth == 0:
            gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()
