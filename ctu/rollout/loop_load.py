"""How hard a batch's episodes worked the event loop that ran them: whether ctu's CPU, not the policy, paced them.

One event loop does every episode's CPU work in turn. While it is busy, a response that has arrived waits in its
queue: that wait is the loop's lag, measured here by a probe that asks to wake every `PROBE_INTERVAL_S` and
records how late it woke (its wake-up waits in the same queue as a response's callback). Where a batch's lag
is a sizeable part of its requests' latency, the episodes ran slower than the policy and the user simulator
answered (`benchmarks/rollout_concurrency.py` measures how much: a wave of N requests leaves one loop N x its
CPU per turn apart), and the generator's `processes` spreads them over more loops.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

PROBE_INTERVAL_S = 0.05
"""Seconds between the lag probe's wake-ups: 20 a second, ~5 ms of CPU a second on an idle loop (0.26 ms a
wake-up, measured on this project's machine; 100 a second cost 23 ms)."""

BUSY_WARNING = 0.8
"""A loop busy this share of a batch or more is saturated: more episodes on it only wait longer. On
`benchmarks/rollout_concurrency.py` (2026-11-26) one loop was busy 59-74% of its 256-episode chat batches
(0.76-0.87 x ideal), 83-88% of its 256-episode token-in/token-out ones (0.58-0.64) and 88-93% at 1024 episodes
(0.46-0.75)."""


@dataclass(frozen=True)
class LoopLoad:
    """One event loop over one batch.

    Attributes:
        seconds: the batch's wall time on the loop.
        cpu_seconds: CPU time of the loop's thread meanwhile (not its worker threads').
        lag_max_s: the probe's longest lateness, in seconds: the longest a response can have waited for the loop.
            (Not a median: the probe wakes 20 times in 1 s of idle loop and once in 1 s of busy loop, so most
            of its samples are from idle stretches whatever the load.)
    """

    seconds: float
    cpu_seconds: float
    lag_max_s: float

    @property
    def busy(self) -> float:
        """The share of the batch's wall time the loop's thread spent on the CPU (0 for an empty batch)."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0


class LoopLoadMeter:
    """Measures the running event loop's `LoopLoad` from `start()` to `stop()` (both called on that loop)."""

    def __init__(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lag_max = 0.0
        """The probe's longest lateness so far, in seconds."""
        self._probe: asyncio.Task[None] | None = None
        self._started = self._cpu = 0.0
        self._due: float | None = None
        """When the probe's pending wake-up is due (perf_counter seconds)."""

    def start(self) -> None:
        """Start the probe and the clocks."""
        self._started, self._cpu = time.perf_counter(), time.thread_time()
        self._probe = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self._due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.lag_max = max(self.lag_max, time.perf_counter() - self._due)

    async def stop(self) -> LoopLoad:
        """Stop the probe; the load since `start()`. A wake-up overdue now counts with its lateness so far (a
        batch that never let the probe wake was one long wait)."""
        now = time.perf_counter()
        seconds, cpu = now - self._started, time.thread_time() - self._cpu
        if self._due is not None and now > self._due:
            self.lag_max = max(self.lag_max, now - self._due)
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        return LoopLoad(seconds, cpu, self.lag_max)
