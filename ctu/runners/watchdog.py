"""Watchdogs: processes of their own, in sessions of their own, that clean up after the process that started them
once it is gone, even by SIGKILL (the out-of-memory killer, a preempted job), which leaves it no chance to.

`watch` ends a helper process (or its process group): the local Tinker server (its process group) and SkyRL's
router (a `multiprocessing` child of the trainer process that outlives a killed parent, holding its ports and
~1 GB). It polls once a second, then sends SIGTERM and, after 15 s, SIGKILL; it exits once the target is gone.

`sweep_shared_memory` removes what a run left in ``/dev/shm``: named semaphores and shared-memory segments of
Python's `multiprocessing` (``sem.*``, ``psm_*``: vLLM's engine, the run's worker processes) whose processes were
killed before they could unlink them (Ray ends a job's workers by signal). Only entries that appeared while the
run was alive (from the call to the driver's end: a run started after it is not touched), that this user owns,
and that no live process maps or holds open are removed.
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


SHM = "/dev/shm"
"""Where POSIX named semaphores and shared-memory segments live on Linux."""

SWEEPER = """
import os, sys, time
parent, shm, before_file, grace = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
with open(before_file) as f:
    before = set(f.read().split("\\n"))
os.unlink(before_file)
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
def held():
    names = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                names.update(line.rsplit(shm + "/", 1)[1].split()[0] for line in maps if shm + "/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(shm + "/"):
                    names.add(target[len(shm) + 1:].split()[0])
        except OSError:
            continue
    return names
while alive(parent):
    time.sleep(1.0)
during = set(os.listdir(shm)) - before  # what appeared while the run was alive: a later run's entries are not ours
deadline = time.monotonic() + grace
while True:
    left = [name for name in during if name.startswith(("sem.", "psm_")) and os.path.exists(os.path.join(shm, name))
            and os.stat(os.path.join(shm, name)).st_uid == os.getuid()]
    if left:
        busy = held()
        for name in left:
            if name not in busy:
                try:
                    os.unlink(os.path.join(shm, name))
                except OSError:
                    pass
    if time.monotonic() > deadline:
        break
    time.sleep(2.0)
"""


def sweep_shared_memory(grace_s: float = 120.0) -> subprocess.Popen[bytes] | None:
    """Start a watchdog that, once this process is gone, removes for `grace_s` seconds (the time a job's processes
    take to end after their driver) the ``/dev/shm`` entries that appeared between this call and this process's
    end and that nothing holds (see the module's docstring); returns its process, or None where there is no
    ``/dev/shm``."""
    import tempfile

    if not os.path.isdir(SHM):
        return None
    with tempfile.NamedTemporaryFile("w", prefix="ctu-shm-", delete=False) as before:
        before.write("\n".join(os.listdir(SHM)))
    return subprocess.Popen([sys.executable, "-c", SWEEPER, str(os.getpid()), SHM, before.name, str(grace_s)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
