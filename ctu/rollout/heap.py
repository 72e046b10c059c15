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

During the batch the youngest generation's threshold is also raised, from Python's 700 net container
allocations to `BATCH_GC_THRESHOLD`, so that a batch normally runs without a collection at all. Each
collection walks every young survivor, and a batch's survivors hold long lists (every episode's token ids,
thousands of items, each visited): collecting after every 700 allocations walked them again and again
(110-180 ms of collector time per 256-episode batch on the rollout concurrency benchmark), and even one
collection after 100,000 stalled the event loop, so every episode at once, for 77 ms in the middle of a
256-episode telecom batch (0.88 x ideal instead of 0.92). Measured there, a batch makes about 420 net container
allocations per telecom episode (108,000 for 256 episodes) and 280 per mixed retail/airline/telecom episode
(285,000 for 1,024): a batch of up to about 2,400 episodes is never collected. Objects freed by reference
counting (nearly all) are freed at once as before; only cyclic garbage waits for a collection (that 77 ms
collection found 3,500 such objects; the threshold bounds them in a batch that makes far more).

At the batch's end, what the batch left alive joins the pre-batch heap in the oldest generation (frozen, then
unfrozen, with it) instead of staying young: restoring the threshold would otherwise set off a young
collection at once that walks every trajectory's token ids (29 ms at the end of each 256-episode batch on
the rollout concurrency benchmark, added to the batch's wall time), though most of them are freed by
reference counting once the trainer has consumed the batch. The cost: cyclic garbage the batch left (tau2's
`Environment.to_json_str` leaves a self-referencing closure per tool result, ~3,000 small objects per batch
there) waits for the next full collection.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

BATCH_GC_THRESHOLD = 1_000_000
"""The youngest generation's collection threshold during a batch (net container allocations; Python's is 700)."""

_lock = threading.Lock()
_depth = 0
_thresholds: tuple[int, int, int] = (700, 10, 10)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the collector's view of the heap and raise its youngest threshold for the duration of the
    block (re-entrant: when the outermost block ends, the thresholds are restored and every object then alive,
    the block's survivors included, is put in the oldest generation)."""
    global _depth, _thresholds
    with _lock:
        if _depth == 0:
            gc.freeze()
            _thresholds = gc.get_threshold()
            gc.set_threshold(max(_thresholds[0], BATCH_GC_THRESHOLD), *_thresholds[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.freeze()  # the batch's survivors too: they join the oldest generation below, unwalked
                gc.set_threshold(*_thresholds)
                gc.unfreeze()
