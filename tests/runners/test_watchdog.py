"""The watchdog ends a helper process once the process that started it is killed with SIGKILL (no cleanup
possible), as SkyRL's router is watched; a process group, as the local Tinker server's: test_tinker_server.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
