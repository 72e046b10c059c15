"""A watchdog that ends a helper process (or its process group) once the process that started it is gone, even by
SIGKILL (the out-of-memory killer, a preempted job), which leaves the parent no chance to clean up.

Used for the local Tinker server (its process group) and SkyRL's router (a `multiprocessing` child of the trainer
process that outlives a killed parent, holding its ports and ~1 GB). The watchdog is a process of its own in a
session of its own: it polls once a second, then sends SIGTERM and, after 15 s, SIGKILL; it exits once the target
is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys

WATCHDOG = """
import os, signal, sys, time
parent, target, group = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "group"
signal_target = os.killpg if group else os.kill
def alive(pid, kill=os.kill):
    try:
        kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
while alive(parent) and alive(target, signal_target):
    time.sleep(1.0)
if alive(target, signal_target):
    signal_target(target, signal.SIGTERM)
    for _ in range(150):
        time.sleep(0.1)
        if not alive(target, signal_target):
            break
    else:
        signal_target(target, signal.SIGKILL)
"""


def watch(target: int, group: bool) -> subprocess.Popen[bytes]:
    """Start a watchdog that ends `target` (a process id; with `group`, the process group it leads) once this
    process is gone; returns the watchdog's process."""
    return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(target), "group" if group else "process"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
