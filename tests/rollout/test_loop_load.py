"""The event loop's load (`ctu.rollout.loop_load`): a thread that computes the whole time reads as saturated even
when another process takes half its core, and one that sleeps reads as idle."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ctu.rollout.loop_load import SCHEDSTAT, LoopLoad, LoopLoadMeter


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not SCHEDSTAT.exists() or not hasattr(os, "sched_setaffinity"),
                    reason="a thread's run-queue time is read from Linux's schedstat")
def test_a_loop_computing_on_a_shared_core_is_busy_and_a_sleeping_one_is_not():
    """Pinned to one core with a process that burns it too, the thread gets about half the core: its CPU time alone
    would say ~50% busy; with its wait for the core it reads as saturated."""
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    rival = subprocess.Popen([sys.executable, "-c", f"import os,time\nos.sched_setaffinity(0, {{{core}}})\n"
                              "end = time.time() + 30\nwhile time.time() < end: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # the rival is running
        meter = LoopLoadMeter()
        burn(1.0)
        load = meter.stop()
    finally:
        os.sched_setaffinity(0, before)
        rival.kill()
        rival.wait()
    assert load.cpu_seconds / load.seconds < 0.75  # the core was shared
    assert load.queued_seconds > 0.2
    assert load.busy >= 0.9

    meter = LoopLoadMeter()
    time.sleep(0.3)
    assert meter.stop().busy < 0.1


def test_busy_is_a_share_of_wall_time():
    assert LoopLoad(0.0, 0.0).busy == 0.0
    assert LoopLoad(2.0, 0.5, 0.5).busy == 0.5
    assert LoopLoad(1.0, 0.7, 0.5).busy == 1.0  # clocks read at slightly different instants never exceed 1
