"""How hard a batch's episodes worked the event loop that ran them: whether ctu's CPU, not the policy, paced them.

One event loop does every episode's CPU work in turn. While it is busy, a response that has arrived waits in its
queue, and a wave of N requests leaves it N x its CPU per turn apart (`benchmarks/rollout_concurrency.py`
measures how far). A loop whose thread was on the CPU, or ready to run and waiting for a core, for most of a
batch's wall time paced the episodes: the generator's `processes` spreads them over more loops. The wait for a core
counts because on a machine whose cores are taken by other work (vLLM's CPU engine, a test beside this one) a
saturated loop spends part of the batch queued for the CPU rather than on it: thread CPU time alone read a
saturated loop as 60% busy beside another pytest worker (2026-11-30). Linux reports that wait per thread
(`/proc/thread-self/schedstat`, its second field: nanoseconds runnable on a run queue; the kernel's
Documentation/scheduler/sched-stats.rst); elsewhere it counts as zero.

Only clocks are read, at a batch's start and end. A probe that woke the loop every 50 ms to time its lag was
tried and dropped: on a 2-core machine running vLLM's CPU engine beside the rollout (CI's SkyRL tests), its
wake-ups cost 19% of a SkyRL training test's wall time (429 s against 361 s without it, measured 2026-11-26).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

SCHEDSTAT = Path("/proc/thread-self/schedstat")

BUSY_WARNING = 0.8
"""A loop busy this share of a batch or more is saturated: more episodes on it only wait longer. On
`benchmarks/rollout_concurrency.py` (2026-11-26, CPU time alone, on an otherwise idle machine) one loop was busy
59-74% of its 256-episode chat batches (0.76-0.87 x ideal), 83-88% of its 256-episode token-in/token-out ones
(0.58-0.64) and 88-93% at 1024 episodes (0.46-0.75)."""


@dataclass(frozen=True)
class LoopLoad:
    """One event loop over one batch.

    Attributes:
        seconds: the batch's wall time on the loop.
        cpu_seconds: CPU time of the loop's thread meanwhile (not its worker threads').
        queued_seconds: time the loop's thread was ready to run but waiting for a core meanwhile (0 where the
            platform does not report it).
    """

    seconds: float
    cpu_seconds: float
    queued_seconds: float = 0.0

    @property
    def busy(self) -> float:
        """The share of the batch's wall time the loop's thread was on the CPU or queued for it, 0-1 (0 for an
        empty batch)."""
        if self.seconds <= 0:
            return 0.0
        return min(1.0, (self.cpu_seconds + self.queued_seconds) / self.seconds)


def queued_seconds() -> float:
    """Seconds the calling thread has spent ready to run and waiting for a core since it started (Linux's
    per-thread schedstat), or 0.0 where that is not reported (other platforms, kernels without schedstats)."""
    try:
        return int(SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class LoopLoadMeter:
    """Measures the `LoopLoad` of the thread running an event loop from its creation to `stop()` (both on that
    thread)."""

    def __init__(self) -> None:
        self._started, self._cpu, self._queued = time.perf_counter(), time.thread_time(), queued_seconds()

    def stop(self) -> LoopLoad:
        """The load since the meter was made."""
        return LoopLoad(time.perf_counter() - self._started, time.thread_time() - self._cpu,
                        queued_seconds() - self._queued)
