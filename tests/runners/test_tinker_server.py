"""The local Tinker server never outlives the run that started it, and keeps what its JAX engine compiles."""

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


def test_the_servers_jax_engine_caches_its_programs_in_ctus_cache_unless_told_where(monkeypatch, tmp_path: Path):
    """JAX's persistent compilation cache goes under ctu's cache folder; a folder the user's environment names wins
    (the run's own check that the engine fills it is tests/runners/test_smoke_run.py's)."""
    from ctu.backends.tinker.server import JAX_CACHE_ENV, jax_cache_env

    monkeypatch.setenv("CTU_CACHE_DIR", str(tmp_path))
    assert jax_cache_env({"PATH": "/bin"}) == {JAX_CACHE_ENV: str(tmp_path / "jax"), "PATH": "/bin"}
    assert jax_cache_env({JAX_CACHE_ENV: "/elsewhere"}) == {JAX_CACHE_ENV: "/elsewhere"}
