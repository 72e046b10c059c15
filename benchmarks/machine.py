"""This machine's speed at the time of a benchmark, so figures taken on different days can be compared.

The project's machines are shared 2-core VMs whose speed varies from day to day (a fixed pure-Python loop took
0.28-0.36 s of CPU on the days the first README figures were taken, 0.63-0.71 s and 1.1-2.1 s on others).
Every benchmark prints that loop's time beside its figures and, for times it holds to a goal, the time
normalised to `REFERENCE_LOOP_S`: ``seconds * REFERENCE_LOOP_S / loop``.
"""

from __future__ import annotations

import statistics
import time

REFERENCE_LOOP_S = 0.33
"""The loop's CPU time on the days the README's first figures were taken: goals are stated at this speed."""


def reference_loop_seconds(repeats: int = 3) -> float:
    """Median CPU seconds of a fixed pure-Python loop (10 million additions) over `repeats` runs."""
    times = []
    for _ in range(repeats):
        start, total = time.process_time(), 0
        for number in range(10_000_000):
            total += number
        times.append(time.process_time() - start)
    return statistics.median(times)


def normalised(seconds: float, loop: float) -> float:
    """`seconds` measured when the loop took `loop` s, as at `REFERENCE_LOOP_S`."""
    return seconds * REFERENCE_LOOP_S / loop
