"""The local Tinker server never outlives the run that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..conftest import REPO

RUN = """
import sys, time
from pathlib import Path
from ctu.backends.tinker.server import LocalTinkerServer

class Sleeper(LocalTinkerServer):  # stands for the server: a process group that would live on
    def command(self):
        return [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"]

server = Sleeper("model", Path(sys.argv[1])).start()
print(server.process.pid, flush=True)
time.sleep(600)
"""


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_run_killed_by_sigkill_takes_its_server_and_the_servers_children_with_it(tmp_path: Path):
    run = subprocess.Popen([sys.executable, "-c", RUN, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    group = int(run.stdout.readline())
    time.sleep(1.0)
    assert group_alive(group)
    run.send_signal(signal.SIGKILL)  # no cleanup code of the run can run
    run.wait(timeout=10)
    deadline = time.monotonic() + 20
    while group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(group), "the server's process group outlived its run"
