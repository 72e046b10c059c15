"""The watchdog ends a helper process once the process that started it is killed with SIGKILL (no cleanup
possible), as SkyRL's router is watched; a process group, as the local Tinker server's: test_tinker_server.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import subprocess, sys, time
from ctu.runners.watchdog import watch
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
watch(helper.pid, group=False)
print(helper.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie (ended, not yet reaped by init) counts as gone
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_a_helper_ends_with_its_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    helper = int(parent.stdout.readline())
    assert alive(helper)
    time.sleep(1.5)  # the helper outlives a living parent
    assert alive(helper)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 20
    while alive(helper) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(helper)


LEAKER = """
import multiprocessing, os, signal, sys
from multiprocessing import shared_memory
semaphore = multiprocessing.get_context("spawn").Semaphore()
segment = shared_memory.SharedMemory(create=True, size=4096)
print(semaphore._semlock.name, segment.name, flush=True)
os.killpg(0, signal.SIGKILL)  # the process and its resource tracker, as Ray ends a job's workers: nothing unlinks
"""


def test_what_a_runs_killed_processes_leave_in_dev_shm_is_removed_once_the_run_is_gone_and_nothing_else(tmp_path):
    """The "run" starts the sweeper, then a child that creates a named semaphore and a shared-memory segment
    (Python's `multiprocessing`, as vLLM's engine and the rollout workers do) is killed with its resource
    tracker, leaving both; an entry a live process holds, made after the sweeper started, stays, and so does one
    made after the run ended, held by no one (a later run's, between its creation and its use)."""
    import subprocess
    import sys
    import time
    from multiprocessing import shared_memory

    shm = Path("/dev/shm")
    run = subprocess.Popen([sys.executable, "-c", "from ctu.runners.watchdog import sweep_shared_memory; import sys; "
                            "sweep_shared_memory(grace_s=10); print('swept from here', flush=True); sys.stdin.read()"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stdin is not None
    assert run.stdout.readline().strip() == "swept from here"
    leaker = subprocess.run([sys.executable, "-c", LEAKER], capture_output=True, text=True, start_new_session=True)
    semaphore, segment = leaker.stdout.split()
    left = [f"sem.{semaphore.lstrip('/')}", segment.lstrip("/")]
    held = shared_memory.SharedMemory(create=True, size=4096)
    try:
        assert all((shm / name).exists() for name in left)
        run.stdin.close()  # the run ends
        run.wait(timeout=30)
        time.sleep(3)  # the sweeper has seen the run end (it looks once a second)
        later = shared_memory.SharedMemory(create=True, size=4096)  # a later run's, unheld for a moment: not touched
        later.close()
        deadline = time.monotonic() + 30
        while any((shm / name).exists() for name in left) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [name for name in left if (shm / name).exists()]
        assert (shm / held.name.lstrip("/")).exists() and (shm / later.name.lstrip("/")).exists()
    finally:
        held.close()
        held.unlink()
        later.unlink()
